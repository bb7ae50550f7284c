/**
 * The `cyclone` CLI's text in and out: its argument parsers (durations, integers, run states),
 * its tables of runs and steps, and the one line it prints for any error.
 */
import { InvalidArgumentError } from 'commander';
import { CycloneError } from './errors.js';
import { LIST_LIMITS_CAP } from './list-limits.js';
import { FINISHED_RUN_STATES, type FinishedRunState } from './retention.js';
import type { ScheduleInfo } from './schedules.js';
import type { LimitInfo, RunInfo, RunSummary, StepInfo } from './types.js';
import type { WorkerInfo } from './workers.js';

const DURATION_UNITS: Record<string, number> = {
  ms: 1,
  s: 1000,
  m: 60_000,
  h: 3_600_000,
  d: 86_400_000,
};

/**
 * Parses a duration of a whole number and one unit: `500ms`, `45s`, `30m`, `12h`, `7d`.
 * A bare number is refused: seconds or milliseconds would be a guess.
 * @returns milliseconds.
 */
export function parseDuration(value: string): number {
  const m = /^(\d+)(ms|s|m|h|d)$/.exec(value);
  const n = m ? Number(m[1]) * (DURATION_UNITS[m[2] as string] as number) : Number.NaN;
  if (!Number.isSafeInteger(n)) {
    throw new InvalidArgumentError(
      m
        ? 'duration too large'
        : 'expected a whole number and a unit (ms, s, m, h, d), e.g. 7d, 12h, 30m, 45s, 500ms',
    );
  }
  return n;
}

/** A duration in ms in the largest unit that divides it: `604800000` → `7d`. */
export function formatDuration(ms: number): string {
  for (const [unit, size] of Object.entries(DURATION_UNITS).reverse()) {
    if (ms >= size && ms % size === 0) return `${ms / size}${unit}`;
  }
  return `${ms}ms`;
}

function parseInteger(value: string, min: number, max: number): number {
  const n = Number(value);
  if (!/^\d+$/.test(value) || !Number.isSafeInteger(n) || n < min || n > max) {
    throw new InvalidArgumentError(
      max === Number.MAX_SAFE_INTEGER
        ? `expected an integer ≥ ${min}`
        : `expected an integer from ${min} to ${max}`,
    );
  }
  return n;
}

/** `--limit`: an integer from 1 to 1,000. */
export const parseLimit = (value: string) => parseInteger(value, 1, 1000);
/** `--batch-size`: an integer from 1 to 100,000. */
export const parseBatchSize = (value: string) => parseInteger(value, 1, 100_000);
/** `--max-runs`: an integer ≥ 1. */
export const parseMaxRuns = (value: string) => parseInteger(value, 1, Number.MAX_SAFE_INTEGER);

/** `--state` of `cleanup`: a comma-separated list of finished run states, without repeats. */
export function parseFinishedStates(value: string): FinishedRunState[] {
  const states = value.split(',').map((s) => s.trim());
  for (const s of states) {
    if (!FINISHED_RUN_STATES.includes(s as FinishedRunState)) {
      throw new InvalidArgumentError(
        `expected a comma-separated list of ${FINISHED_RUN_STATES.join(', ')}${s === 'running' ? ' (a running run is never deleted)' : ''}`,
      );
    }
  }
  return [...new Set(states as FinishedRunState[])];
}

/**
 * `--data` of `signal`: any JSON text (an object, an array, a string, a number, true, false,
 * null); whether it is storable (size, NUL) is the client's check.
 */
export function parseJson(value: string): unknown {
  try {
    return JSON.parse(value);
  } catch (e) {
    throw new InvalidArgumentError(
      `expected JSON, e.g. '{"by":"alice"}' (${e instanceof Error ? e.message : String(e)})`,
    );
  }
}

/** One line for any error: the typed errors' own messages, pg's message, never a stack. */
export function formatError(e: unknown): string {
  let msg: string;
  if (e instanceof CycloneError) msg = e.message;
  else if (e instanceof AggregateError && e.errors.length > 0) {
    // pg reports a refused connection to every address it tried as an AggregateError.
    msg = formatError(e.errors[0]);
  } else if (e instanceof Error) {
    const code = (e as { code?: string }).code;
    msg = e.message || code || e.name;
    if (code === '42P01' || code === '3F000')
      msg += ' (has `cyclone migrate` been run on this database and schema?)';
    if (code === 'ECONNREFUSED' || code === 'ENOTFOUND' || code === 'ETIMEDOUT') {
      msg = `cannot connect to PostgreSQL: ${msg}`;
    }
  } else msg = String(e);
  return msg.replace(/\s*\n\s*/g, ' ').trim();
}

/** `cyclone runs`: one row per run, or `no runs`. */
export function formatRuns(runs: RunSummary[]): string {
  if (runs.length === 0) return 'no runs';
  return table(
    ['RUN', 'WORKFLOW', 'STATE', 'STEPS LEFT', 'CREATED', 'SUBMIT KEY'],
    runs.map((r) => [
      r.runId,
      r.workflow,
      r.state,
      String(r.stepsRemaining),
      iso(r.createdAt),
      r.submitKey === null ? '-' : truncate(r.submitKey, 40),
    ]),
  );
}

/**
 * Why `url` cannot be a PostgreSQL connection string (pg would read `notaurl` as a host name and
 * fail later with a DNS error); undefined when it can. Accepts `postgres://` and `postgresql://`
 * URLs, `socket:` URLs and a socket directory path.
 */
export function databaseUrlProblem(url: string): string | undefined {
  if (url.startsWith('/') || url.startsWith('socket:')) return undefined;
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return 'expected postgres://user:password@host:5432/database';
  }
  if (parsed.protocol !== 'postgres:' && parsed.protocol !== 'postgresql:') {
    return `expected a postgres:// or postgresql:// URL, got ${parsed.protocol}//…`;
  }
  return undefined;
}

/**
 * The line under `cyclone runs` when it shows fewer runs than match: `50 of 1234 runs` (or `of
 * at least 10000`: the count stops at a cap); undefined when every match is shown.
 */
export function formatRunsFooter(
  shown: number,
  total: { count: number; capped: boolean },
): string | undefined {
  if (!total.capped && total.count <= shown) return undefined;
  const of = total.capped ? `at least ${total.count}` : String(total.count);
  return `${shown} of ${of} runs, newest first (--limit up to 1000, --state and --workflow narrow it)`;
}

/**
 * Whether `s` waits for a worker to claim it now: `available`, or `retryable`/`scheduled` with
 * its time reached (by `now`). Such a step moves only if a live worker carries its workflow.
 */
export function waitsForWorker(s: StepInfo, now: Date): boolean {
  if (s.state === 'available') return true;
  if (s.state !== 'retryable' && s.state !== 'scheduled') return false;
  return new Date(s.scheduledAt).getTime() <= now.getTime();
}

/**
 * `cyclone run`: the run's fields, then one row per node with its upstream and what is known of
 * it now: the lease owner of a running step, the next attempt's time of a retryable one, the last
 * error of one that failed; nothing under a completed node (its earlier errors are history,
 * `--json` has them). With `carried: false` (no live worker carries the run's workflow), a step
 * that waits for a worker (`waitsForWorker`) says so first.
 */
export function formatRun(
  run: RunInfo,
  now: Date = new Date(),
  options: { carried?: boolean } = {},
): string {
  const head = [
    `run       ${run.runId}`,
    `workflow  ${run.workflow}`,
    `state     ${run.state}`,
    `created   ${iso(run.createdAt)}`,
    `finished  ${run.completedAt ? iso(run.completedAt) : '-'}`,
    ...(run.submitKey === null ? [] : [`key       ${truncate(run.submitKey, 80)}`]),
    `input     ${truncate(JSON.stringify(run.input), 100)}`,
  ];
  const rows = run.steps.map((s) => [
    s.node,
    s.state,
    `${s.attempt}/${s.maxAttempts}`,
    s.after.length ? s.after.join(',') : '-',
    options.carried === false && waitsForWorker(s, now)
      ? uncarried(run.workflow, stepDetail(s, now))
      : stepDetail(s, now),
  ]);
  return `${head.join('\n')}\n\n${table(['NODE', 'STATE', 'ATTEMPT', 'AFTER', 'DETAIL'], rows)}`;
}

/** The DETAIL cell of a step no live worker can claim: that first, then its usual cell. */
function uncarried(workflow: string, detail: string): string {
  const why = `no live worker carries workflow ${showName(workflow, "'")}`;
  return detail === '-' ? why : `${why}; ${detail}`;
}

/** The DETAIL cell of a step: what its state waits on, and the last error where it matters. */
function stepDetail(s: StepInfo, now: Date): string {
  const last = s.errors[s.errors.length - 1];
  const error = last
    ? truncate(`[${last.kind}] ${last.message}`.replace(/\s*\n\s*/g, ' '), 100)
    : undefined;
  if (s.waitFor !== null) {
    const waits = waitDetail(s, now);
    if (waits !== undefined) return waits;
  }
  switch (s.state) {
    case 'running':
      return `held by ${s.leaseOwner ?? '?'}, lease until ${iso(s.leaseExpiresAt)}`;
    case 'retryable': {
      const next = `next attempt ${iso(s.scheduledAt)}${fromNow(s.scheduledAt, now)}`;
      return error ? `${next}; last error ${error}` : next;
    }
    case 'scheduled':
      return `due ${iso(s.scheduledAt)}${fromNow(s.scheduledAt, now)}${s.snoozes ? `, snoozed ${s.snoozes}×` : ''}`;
    case 'discarded':
    case 'cancelled':
      return error ?? '-';
    default:
      // completed (earlier errors are history), pending, available
      return '-';
  }
}

/**
 * The DETAIL cell of a wait node that waits, or will: the signal's name and its deadline (its
 * `scheduledAt` is the deadline, or ten years ahead without one, which would mislead); undefined
 * for a state the common cell describes (running, retryable, finished).
 */
function waitDetail(s: StepInfo, now: Date): string | undefined {
  const name = `signal ${showName(String(s.waitFor), "'")}`;
  const until = s.waitDeadline
    ? ` until ${iso(s.waitDeadline)}${fromNow(s.waitDeadline, now)}`
    : '';
  switch (s.state) {
    case 'pending':
      return `will wait for ${name}`;
    case 'available':
      return `waits for ${name}${until}`;
    case 'scheduled':
      // Not claimed yet: the root of a delayed run, which starts waiting at its run's start.
      return s.startedAt === null
        ? `due ${iso(s.scheduledAt)}${fromNow(s.scheduledAt, now)}, then waits for ${name}${until}`
        : `waiting for ${name}${until}`;
    default:
      return undefined;
  }
}

/**
 * A name as the CLI prints it on one line: as it is (between `quote`s) when it holds only word
 * characters and `.:@/-`, else JSON-escaped, so that spaces or line breaks cannot break the line.
 */
export function showName(name: string, quote = ''): string {
  return /^[\w.:@/-]+$/.test(name) ? `${quote}${name}${quote}` : JSON.stringify(name);
}

/** ` (in 12s)` for a time ahead of `now`, ` (due)` for one reached; empty without a time. */
function fromNow(at: Date | string | null, now: Date): string {
  if (at === null) return '';
  const ms = new Date(at).getTime() - now.getTime();
  if (ms <= 0) return ' (due)';
  if (ms < 1000) return ` (in ${ms}ms)`;
  if (ms < 120_000) return ` (in ${Math.round(ms / 1000)}s)`;
  if (ms < 7_200_000) return ` (in ${Math.round(ms / 60_000)}m)`;
  return ` (in ${Math.round(ms / 3_600_000)}h)`;
}

/** `cyclone schedules`: one row per cron schedule, or a line saying there is none. */
export function formatSchedules(schedules: ScheduleInfo[]): string {
  if (schedules.length === 0) {
    return 'no schedules (a worker registers the schedules it carries when it starts)';
  }
  return table(
    ['NAME', 'CRON', 'TIMEZONE', 'WORKFLOW', 'STATE', 'LAST FIRE', 'NEXT FIRE'],
    schedules.map((s) => [
      s.name,
      s.cron,
      s.timezone,
      s.workflow,
      scheduleState(s),
      iso(s.lastFireAt),
      iso(s.nextFireAt),
    ]),
  );
}

/**
 * `cyclone limits`: one row per limit (per key for a limit with a key), or a line saying there is
 * none. HELD: running steps (concurrency) or starts in the window ending now (rate); WAITING: due
 * steps not started, counted up to `LIST_LIMITS_CAP` (shown with a +).
 */
export function formatLimits(limits: LimitInfo[]): string {
  if (limits.length === 0) {
    return 'no limits (a worker records the limits of its actions when it starts)';
  }
  const capped = (n: number) => (n >= LIST_LIMITS_CAP ? `${LIST_LIMITS_CAP}+` : String(n));
  return table(
    ['ACTION', 'LIMIT', 'KEY', 'HELD', 'WAITING'],
    limits.map((l) => [
      l.action,
      l.kind === 'concurrency'
        ? `concurrency ${l.limit}`
        : `rate ${l.limit}/${formatDuration(l.periodMs ?? 0)}`,
      l.key !== null ? truncate(l.key, 40) : l.keyed ? '(no key in use)' : '-',
      String(l.held),
      capped(l.waiting),
    ]),
  );
}

/** `active`, `paused`, `not carried` (no worker has it: it does not fire), and a waiting trigger. */
function scheduleState(s: ScheduleInfo): string {
  const state = [s.paused ? 'paused' : s.carried ? 'active' : '', s.carried ? '' : 'not carried']
    .filter(Boolean)
    .join(', ');
  return s.triggerRequestedAt ? `${state}, trigger waiting` : state;
}

/** Left-aligned columns two spaces apart, as wide as their widest cell; the last is not padded. */
function table(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: string[]) =>
    cells
      .map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i] ?? 0)))
      .join('  ')
      .trimEnd();
  return [line(header), ...rows.map(line)].join('\n');
}

function iso(d: Date | string | null): string {
  if (d === null) return '-';
  return (d instanceof Date ? d : new Date(d)).toISOString();
}

function truncate(s: string, max: number): string {
  return s.length <= max ? s : `${s.slice(0, max - 1)}…`;
}

/**
 * `cyclone workers`: one row per registered worker (alive or not yet deleted), or a line saying
 * there is none. SEEN: seconds since its last refresh; IN FLIGHT/CONC: steps held of its
 * concurrency.
 */
export function formatWorkers(workers: WorkerInfo[], now: Date = new Date()): string {
  if (workers.length === 0) {
    return 'no workers (a worker registers itself when it starts and removes itself when it stops)';
  }
  return table(
    ['WORKER', 'HOST', 'PID', 'STATE', 'IN FLIGHT', 'STARTED', 'SEEN', 'WORKFLOWS'],
    workers.map((w) => [
      truncate(w.workerId, 48),
      truncate(w.host, 32),
      String(w.pid),
      w.alive ? 'alive' : 'not seen',
      `${w.inFlight}/${w.concurrency}`,
      iso(w.startedAt),
      `${Math.max(0, Math.round((now.getTime() - w.lastSeenAt.getTime()) / 1000))}s ago`,
      truncate(w.workflows.join(','), 60),
    ]),
  );
}

/**
 * A port number for `cyclone ui --port`.
 * @throws InvalidArgumentError unless an integer from 0 to 65535 (0: any free port).
 */
export function parsePort(value: string): number {
  const n = Number(value);
  if (!/^\d+$/.test(value) || !Number.isSafeInteger(n) || n > 65_535) {
    throw new InvalidArgumentError('must be a port number from 0 to 65535');
  }
  return n;
}

/** Whether `host` names this machine's loopback interface (127.0.0.0/8, ::1, localhost). */
export function isLoopbackHost(host: string): boolean {
  const h = host
    .trim()
    .toLowerCase()
    .replace(/^\[|\]$/g, '');
  return (
    h === 'localhost' ||
    h === '::1' ||
    h === '0:0:0:0:0:0:0:1' ||
    /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(h) ||
    /^::ffff:127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(h)
  );
}
