/**
 * What the rows need to drive and watch real worker processes: start one (worker.ts), wait for
 * one of its lines, kill it; read a step, the observation tables and the database clock.
 */
import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';
import { ENGINE_SCHEMA } from './workflows.js';

const workerScript = join(dirname(fileURLToPath(import.meta.url)), 'worker.ts');
const live = new Set<WorkerProcess>();

/** A worker child process. */
export class WorkerProcess {
  readonly proc: ChildProcessWithoutNullStreams;
  readonly lines: string[] = [];
  stderr = '';
  workerId = '';
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  private waiters = new Set<() => void>();

  private constructor(
    readonly label: string,
    databaseUrl: string,
    victim: boolean,
  ) {
    this.proc = spawn(process.execPath, [...process.execArgv, workerScript], {
      env: { ...process.env, DATABASE_URL: databaseUrl, VICTIM: victim ? '1' : '0' },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    live.add(this);
    this.exited = new Promise((r) =>
      this.proc.once('exit', (code, signal) => {
        live.delete(this);
        this.notify();
        r({ code, signal });
      }),
    );
    createInterface({ input: this.proc.stdout }).on('line', (line) => {
      this.lines.push(line);
      this.notify();
    });
    this.proc.stderr.setEncoding('utf8').on('data', (d: string) => {
      this.stderr = (this.stderr + d).slice(-20_000);
    });
  }

  /** Starts worker.ts (the victim when `victim`) and waits for its READY line. */
  static async start(label: string, databaseUrl: string, victim: boolean): Promise<WorkerProcess> {
    const w = new WorkerProcess(label, databaseUrl, victim);
    const m = await w.line(/^READY (\d+) (\S+)$/);
    w.workerId = m[2] ?? '';
    return w;
  }

  get pid(): number {
    return this.proc.pid ?? -1;
  }

  /** `A (pid 123)`. */
  toString(): string {
    return `${this.label} (pid ${this.pid})`;
  }

  private notify(): void {
    for (const w of [...this.waiters]) w();
  }

  /** The first stdout line matching `pattern`, seen or to come. @throws after `ms` or on exit. */
  line(pattern: RegExp, ms = 20_000): Promise<RegExpMatchArray> {
    return new Promise((resolve, reject) => {
      const check = () => {
        for (const l of this.lines) {
          const m = l.match(pattern);
          if (m) return done(() => resolve(m));
        }
        if (this.proc.exitCode !== null || this.proc.signalCode !== null) {
          done(() =>
            reject(new Error(`${this} exited before printing ${pattern}:\n${this.stderr}`)),
          );
        }
      };
      const timer = setTimeout(
        () => done(() => reject(new Error(`${this} did not print ${pattern} within ${ms} ms`))),
        ms,
      );
      const done = (fn: () => void) => {
        clearTimeout(timer);
        this.waiters.delete(check);
        fn();
      };
      this.waiters.add(check);
      check();
    });
  }

  /** SIGKILL: the process stops at whatever instruction it is on. */
  async kill(): Promise<NodeJS.Signals | null> {
    if (this.proc.exitCode === null && this.proc.signalCode === null) this.proc.kill('SIGKILL');
    return (await this.exited).signal;
  }
}

/** SIGKILLs every worker still alive (between rows, and on the way out). */
export async function killAll(): Promise<void> {
  await Promise.all([...live].map((w) => w.kill()));
}

/** A step as stored. */
export interface StepRow {
  state: string;
  attempt: number;
  lease_owner: string | null;
  lease_expires_at: Date | null;
  scheduled_at: Date;
  output: { attempt?: number; pid?: number } | null;
  errors: { attempt: number; kind: string; message: string }[];
}

export async function step(pool: pg.Pool, runId: string, node: string): Promise<StepRow> {
  const { rows } = await pool.query<StepRow>(
    `SELECT state, attempt, lease_owner, lease_expires_at, scheduled_at, output, errors
     FROM ${ENGINE_SCHEMA}.cyclone_steps WHERE run_id = $1 AND node = $2`,
    [runId, node],
  );
  if (!rows[0]) throw new Error(`no step ${node} in run ${runId}`);
  return rows[0];
}

export async function runState(pool: pg.Pool, runId: string): Promise<string> {
  const { rows } = await pool.query<{ state: string }>(
    `SELECT state FROM ${ENGINE_SCHEMA}.cyclone_runs WHERE id = $1`,
    [runId],
  );
  return rows[0]?.state ?? 'missing';
}

/** Rows of an observation table for one step, in order: `[{ attempt, pid }]`. */
export async function rowsOf(
  pool: pg.Pool,
  table: 'invocations' | 'business' | 'effects_raw',
  runId: string,
  node: string,
): Promise<{ attempt: number; pid: number; at?: Date }[]> {
  const cols = table === 'invocations' ? 'attempt, pid, at' : 'attempt, pid';
  const { rows } = await pool.query(
    `SELECT ${cols} FROM crash_matrix_obs.${table} WHERE run_id = $1 AND node = $2 ORDER BY id`,
    [runId, node],
  );
  return rows;
}

/** The effect as a key-honouring provider kept it (one per `${runId}:${node}`). */
export async function keyedEffects(
  pool: pg.Pool,
  runId: string,
  node: string,
): Promise<{ attempt: number; pid: number }[]> {
  const { rows } = await pool.query(
    'SELECT attempt, pid FROM crash_matrix_obs.effects_keyed WHERE key = $1',
    [`${runId}:${node}`],
  );
  return rows;
}

/** The database clock, the one leases are measured on. */
export async function dbNow(pool: pg.Pool): Promise<Date> {
  const { rows } = await pool.query<{ now: Date }>('SELECT clock_timestamp() AS now');
  return (rows[0] as { now: Date }).now;
}

/** Polls `read` until `done(value)`, every 25 ms. @throws after `ms` with the last value. */
export async function until<T>(
  what: string,
  read: () => Promise<T>,
  done: (v: T) => boolean,
  ms = 20_000,
): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await read();
    if (done(v)) return v;
    if (Date.now() > deadline) {
      throw new Error(`timed out waiting for ${what}; last: ${JSON.stringify(v)}`);
    }
    await new Promise((r) => setTimeout(r, 25));
  }
}
