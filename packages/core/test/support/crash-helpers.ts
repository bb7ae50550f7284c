/**
 * Database probes of the crash tests: read steps and instrumentation rows, and wait by polling
 * with a deadline (never a fixed sleep).
 */
import type pg from 'pg';
import type { StepError } from '../../src/index.js';

export interface StepRow {
  run_id: string;
  node: string;
  state: string;
  attempt: number;
  max_attempts: number;
  lease_owner: string | null;
  lease_expires_at: Date | null;
  started_at: Date | null;
  completed_at: Date | null;
  output: { attempt?: number; pid?: number; aborted?: boolean } | null;
  errors: StepError[];
}

export async function stepRow(pool: pg.Pool, runId: string, node: string): Promise<StepRow> {
  const { rows } = await pool.query<StepRow>(
    `SELECT run_id, node, state, attempt, max_attempts, lease_owner, lease_expires_at, started_at,
            completed_at, output, errors
     FROM cyclone.cyclone_steps WHERE run_id = $1 AND node = $2`,
    [runId, node],
  );
  const row = rows[0];
  if (!row) throw new Error(`no step ${runId}/${node}`);
  return row;
}

export async function runState(pool: pg.Pool, runId: string): Promise<string> {
  const { rows } = await pool.query<{ state: string }>(
    'SELECT state FROM cyclone.cyclone_runs WHERE id = $1',
    [runId],
  );
  return rows[0]?.state ?? 'missing';
}

export interface Invocation {
  run_id: string;
  node: string;
  attempt: number;
  pid: number;
  at: Date;
}

/** Handler invocations of a step, in order (ctx.runId, ctx.node, ctx.attempt as the handler saw them). */
export async function invocations(
  pool: pg.Pool,
  runId: string,
  node: string,
): Promise<Invocation[]> {
  const { rows } = await pool.query<Invocation>(
    'SELECT run_id, node, attempt, pid, at FROM invocations WHERE run_id = $1 AND node = $2 ORDER BY id',
    [runId, node],
  );
  return rows;
}

/** Rows of `business` (written on completionTx) or `effects_raw` for a step, in order. */
export async function writes(
  pool: pg.Pool,
  table: 'business' | 'effects_raw',
  runId: string,
  node: string,
): Promise<{ attempt: number; pid: number }[]> {
  const { rows } = await pool.query<{ attempt: number; pid: number }>(
    `SELECT attempt, pid FROM ${table} WHERE run_id = $1 AND node = $2 ORDER BY id`,
    [runId, node],
  );
  return rows;
}

/** Rows of `effects_keyed` for the step's key `${runId}:${node}`. */
export async function keyedEffects(
  pool: pg.Pool,
  runId: string,
  node: string,
): Promise<{ key: string; attempt: number; pid: number }[]> {
  const { rows } = await pool.query<{ key: string; attempt: number; pid: number }>(
    'SELECT key, attempt, pid FROM effects_keyed WHERE key = $1',
    [`${runId}:${node}`],
  );
  return rows;
}

/** The database clock (the one leases are measured on). */
export async function dbNow(pool: pg.Pool): Promise<Date> {
  const { rows } = await pool.query<{ now: Date }>('SELECT clock_timestamp() AS now');
  return (rows[0] as { now: Date }).now;
}

/**
 * Polls `read` every `intervalMs` until `done(value)`; returns that value.
 * @throws after `timeoutMs`, with `what` and the last value read.
 */
export async function waitFor<T>(
  what: string,
  read: () => Promise<T>,
  done: (value: T) => boolean,
  timeoutMs = 20_000,
  intervalMs = 50,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await read();
    if (done(value)) return value;
    if (Date.now() >= deadline) {
      throw new Error(
        `timed out after ${timeoutMs} ms waiting for ${what}; last value: ${JSON.stringify(value)}`,
      );
    }
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}
