/**
 * `pnpm soak` options. Durations take `ms`, `s` or `m` (`90s`, `10m`, `1500ms`; a bare number
 * is seconds).
 */
import { parseArgs } from 'node:util';
import { failoverUnavailable } from './failover.js';
import { partitionUnavailable } from './partition.js';
import { pgbouncerUnavailable } from './pgbouncer.js';

/** The fault kinds (`--faults`). */
export const FAULT_KINDS = [
  'kill',
  'terminate',
  'pg-restart',
  'provider',
  'stall',
  'partition',
  'failover',
  'pgbouncer',
] as const;
export type FaultKind = (typeof FAULT_KINDS)[number];

export interface SoakOptions {
  /** How long runs are submitted and faults injected (ms). */
  durationMs: number;
  /** Most runs submitted (default: no limit but the duration). */
  runs: number;
  /** Runs submitted per second. */
  rate: number;
  /** Worker processes. */
  workers: number;
  /** Steps each worker runs at once. */
  concurrency: number;
  /** Fault kinds on. */
  faults: FaultKind[];
  /** Mean time between two faults (ms). */
  faultEveryMs: number;
  /** Least time between two PostgreSQL restarts (ms). */
  pgRestartEveryMs: number;
  /** Least time between two failovers (ms). */
  failoverEveryMs: number;
  /** Fault kinds of `all` left out here, and why. */
  notes: string[];
  /** Longest wait, after the last submission, for every run to end (ms). */
  settleMs: number;
  /** Lease of a claimed step (ms); the heartbeat runs every lease/3. */
  leaseMs: number;
  /** The recovery sweep's interval (ms). */
  sweepMs: number;
  /** Seed of the chaos schedule and the workload's choices. */
  seed: number;
  /** A server of yours instead of the dedicated embedded one (never restarted). */
  databaseUrl: string | undefined;
  /** Where the report (report.json) and the worker logs go. */
  outDir: string | undefined;
  /** Keep the embedded server's data directory. */
  keep: boolean;
  /** A recovery (worker death → its steps running elsewhere) slower than this fails the soak. */
  maxRecoveryMs: number;
  /** Print the JSON report on stdout instead of the table. */
  json: boolean;
  /** The workers reach PostgreSQL through a PgBouncer of the soak's (pgbouncer.ts). */
  pgbouncer: boolean;
}

export class UsageError extends Error {}

export const USAGE = `Usage: pnpm soak [options]

Runs a mixed workload on several worker processes while injecting faults, then checks that no
run was lost and no effect happened twice. Exit 0 when every invariant holds, 1 when one fails,
2 on bad usage.

Options:
  --duration <d>          submission and fault phase (default 90s)
  --runs <n>              at most n runs (default: as many as the duration allows)
  --rate <r>              runs submitted per second (default 4)
  --workers <n>           worker processes (default 4)
  --concurrency <n>       steps per worker at once (default 6)
  --faults <list>         comma-separated: ${FAULT_KINDS.join(', ')}; or all (default), none
  --fault-every <d>       mean time between faults (default 3s)
  --pg-restart-every <d>  least time between PostgreSQL restarts (default 60s)
  --failover-every <d>    least time between failovers to the standby (default 60s)
  --settle <d>            longest wait for the last runs after the fault phase (default 90s)
  --lease <d>             step lease (default 3s)
  --sweep <d>             recovery sweep interval (default 1s)
  --seed <n>              seed of the fault schedule and workload (default: random)
  --max-recovery <d>      fail when a killed worker's step waits longer than this (default 30s)
  --database-url <url>    use this server instead of a dedicated embedded one (no restarts)
  --pgbouncer             workers through a PgBouncer in transaction mode (pgbouncer.ts)
  --out <dir>             report.json and worker logs (default .cyclone/soak/<time>)
  --keep                  keep the embedded server's data directory
  --json                  print the JSON report instead of the table
  -h, --help              this text`;

/** Parses a duration: `90s`, `10m`, `1500ms`, or a number of seconds. */
export function parseDuration(name: string, v: string): number {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m)?$/.exec(v.trim());
  if (!m)
    throw new UsageError(`--${name}: expected a duration such as 90s, 10m or 500ms, got '${v}'`);
  const n = Number(m[1]);
  const ms = m[2] === 'ms' ? n : m[2] === 'm' ? n * 60_000 : n * 1000;
  return Math.round(ms);
}

function parseCount(name: string, v: string, min: number, max: number): number {
  if (!/^\d+(\.\d+)?$/.test(v)) throw new UsageError(`--${name}: expected a number, got '${v}'`);
  const n = Number(v);
  if (n < min || n > max) throw new UsageError(`--${name}: expected ${min} to ${max}, got ${v}`);
  return n;
}

/**
 * Parses `argv` (the arguments after the program).
 * @returns the options, or `'help'`.
 * @throws UsageError on an unknown option or a bad value.
 */
export function parseOptions(argv: string[]): SoakOptions | 'help' {
  let values: Record<string, string | boolean | undefined>;
  try {
    ({ values } = parseArgs({
      args: argv,
      allowPositionals: false,
      strict: true,
      options: {
        duration: { type: 'string' },
        runs: { type: 'string' },
        rate: { type: 'string' },
        workers: { type: 'string' },
        concurrency: { type: 'string' },
        faults: { type: 'string' },
        'fault-every': { type: 'string' },
        'pg-restart-every': { type: 'string' },
        'failover-every': { type: 'string' },
        settle: { type: 'string' },
        lease: { type: 'string' },
        sweep: { type: 'string' },
        seed: { type: 'string' },
        'max-recovery': { type: 'string' },
        'database-url': { type: 'string' },
        out: { type: 'string' },
        keep: { type: 'boolean' },
        pgbouncer: { type: 'boolean' },
        json: { type: 'boolean' },
        help: { type: 'boolean', short: 'h' },
      },
    }));
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
  if (values.help) return 'help';
  const str = (k: string) => values[k] as string | undefined;
  const dur = (k: string, def: number) =>
    str(k) === undefined ? def : parseDuration(k, str(k) as string);
  const cnt = (k: string, def: number, min: number, max: number) =>
    str(k) === undefined ? def : parseCount(k, str(k) as string, min, max);

  let faults: FaultKind[] = [...FAULT_KINDS];
  const f = str('faults');
  if (f !== undefined) {
    if (f === 'all') faults = [...FAULT_KINDS];
    else if (f === 'none') faults = [];
    else {
      faults = [];
      for (const k of f.split(',').map((s) => s.trim())) {
        if (!(FAULT_KINDS as readonly string[]).includes(k)) {
          throw new UsageError(
            `--faults: unknown fault '${k}' (expected ${FAULT_KINDS.join(', ')}, all or none)`,
          );
        }
        if (!faults.includes(k as FaultKind)) faults.push(k as FaultKind);
      }
    }
  }
  const runs = cnt('runs', Number.POSITIVE_INFINITY, 1, 10_000_000);
  const rate = cnt('rate', 4, 0.1, 500);
  // --runs alone: the duration is what those runs need at the rate.
  const durationMs =
    str('duration') === undefined && Number.isFinite(runs)
      ? Math.ceil((runs / rate) * 1000)
      : dur('duration', 90_000);
  if (durationMs < 1_000) throw new UsageError('--duration: at least 1s');
  const leaseMs = dur('lease', 3_000);
  if (leaseMs < 300) throw new UsageError('--lease: at least 300ms');
  const databaseUrl = str('database-url');
  if (databaseUrl !== undefined && faults.includes('pg-restart')) {
    // Never restart a server the soak did not start.
    faults = faults.filter((k) => k !== 'pg-restart');
  }
  const notes: string[] = [];
  faults = failoverFaults(faults, databaseUrl, f === undefined || f === 'all', notes);
  faults = partitionFaults(faults, f === undefined || f === 'all', (n) => notes.push(n));
  const pgbouncer = pgbouncerFaults(faults, values.pgbouncer === true, f, notes);
  faults = pgbouncer.faults;
  return {
    durationMs,
    runs,
    rate,
    workers: Math.trunc(cnt('workers', 4, 1, 32)),
    concurrency: Math.trunc(cnt('concurrency', 6, 1, 100)),
    faults,
    faultEveryMs: dur('fault-every', 3_000),
    pgRestartEveryMs: dur('pg-restart-every', 60_000),
    failoverEveryMs: dur('failover-every', 60_000),
    notes,
    settleMs: dur('settle', 90_000),
    leaseMs,
    sweepMs: dur('sweep', 1_000),
    seed:
      str('seed') === undefined
        ? Math.floor(Math.random() * 2 ** 31)
        : Math.trunc(cnt('seed', 0, 0, 2 ** 31)),
    databaseUrl,
    outDir: str('out'),
    keep: values.keep === true,
    maxRecoveryMs: dur('max-recovery', 30_000),
    json: values.json === true,
    pgbouncer: pgbouncer.on,
  };
}

/**
 * `faults` with `failover` kept only where it can run: never on a server of the caller's (it is
 * never failed over), and only with PostgreSQL's server binaries (pg_basebackup) at hand. Left
 * out of `all` with a note; named explicitly, its absence is a usage error.
 * @throws UsageError when `failover` was asked for by name and cannot run.
 */
function failoverFaults(
  faults: FaultKind[],
  databaseUrl: string | undefined,
  fromAll: boolean,
  notes: string[],
): FaultKind[] {
  if (!faults.includes('failover')) return faults;
  const why =
    databaseUrl !== undefined
      ? 'the soak never fails over a server it did not start (--database-url)'
      : failoverUnavailable();
  if (why === undefined) return faults;
  if (!fromAll) throw new UsageError(`--faults failover: ${why}`);
  notes.push(`failover left out: ${why}`);
  return faults.filter((k) => k !== 'failover');
}

/**
 * `faults` with `partition` kept only where hosts can be made (root, iproute2, network
 * namespaces); left out of `all` with a note, and a usage error when named.
 * @throws UsageError when `partition` was asked for by name and cannot run.
 */
function partitionFaults(
  faults: FaultKind[],
  fromAll: boolean,
  note: (line: string) => void,
): FaultKind[] {
  if (!faults.includes('partition')) return faults;
  const why = partitionUnavailable();
  if (why === undefined) return faults;
  if (!fromAll) throw new UsageError(`--faults partition: ${why}`);
  note(`partition left out: ${why}`);
  return faults.filter((k) => k !== 'partition');
}

/**
 * Whether the workers go through PgBouncer, and `faults` with `pgbouncer` kept only then:
 * `--pgbouncer`, or the `pgbouncer` fault named in `--faults`, turns it on; under `all` without
 * `--pgbouncer` the fault is left out with a note (the workers reach PostgreSQL directly).
 * @throws UsageError when PgBouncer is asked for and is not installed.
 */
function pgbouncerFaults(
  faults: FaultKind[],
  asked: boolean,
  faultsArg: string | undefined,
  notes: string[],
): { on: boolean; faults: FaultKind[] } {
  const fromAll = faultsArg === undefined || faultsArg === 'all';
  const named = !fromAll && faults.includes('pgbouncer');
  if (!asked && !named) {
    if (faults.includes('pgbouncer')) {
      notes.push('pgbouncer left out: the workers reach PostgreSQL directly (add --pgbouncer)');
    }
    return { on: false, faults: faults.filter((k) => k !== 'pgbouncer') };
  }
  const why = pgbouncerUnavailable();
  if (why !== undefined)
    throw new UsageError(`${asked ? '--pgbouncer' : '--faults pgbouncer'}: ${why}`);
  return { on: true, faults };
}
