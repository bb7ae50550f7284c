/**
 * Workflows of the crash tests, shared by the test files (in-process workers, assertions) and
 * the child worker script (crash-worker.ts). The handlers instrument themselves in plain tables
 * of the test database (see `CRASH_TABLES`) and, in a *victim* process, stop at a precise point
 * of the step (ARCHITECTURE.md § The crash matrix) so the parent can SIGKILL it there (or let
 * it stall past its lease).
 *
 * Every process configures the module once with `configureCrash` (its own pool, how to signal
 * the parent, whether it is the victim).
 */
import { existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type pg from 'pg';
import { type Context, newAction, newWorkflow } from '../../src/index.js';

/**
 * Where the victim stops:
 * - `before_effect`: after recording the invocation, before any side effect (matrix row 1).
 * - `after_effect`: after the business write on `completionTx` and the external effect, before
 *   the completion commit (row 2).
 * - `after_commit`: node `first` of `ChainFlow` completes normally; the victim then holds node
 *   `second`, so it dies right after `first`'s completion committed (row 3).
 * - `stall`: like `after_effect`, then the victim blocks its event loop (heartbeats included)
 *   until the parent creates `goFile(runId, 'a')`, then returns at once: alive but slow, row 4.
 *   Any later attempt (the rescuer's) waits, without blocking, for `goFile(runId, 'b')`.
 * - `throw`: attempt 1 writes on `completionTx`, then throws (row 5; not victim-dependent).
 * - `none`: runs straight through.
 */
export type CrashPoint =
  | 'before_effect'
  | 'after_effect'
  | 'after_commit'
  | 'stall'
  | 'throw'
  | 'none';

export interface CrashInput {
  crash: CrashPoint;
}

export interface CrashConfig {
  /** Plain pool of the test database: writes here are outside the completion transaction. */
  pool: pg.Pool;
  /** Tells the parent something (a line on stdout in a child). */
  emit: (line: string) => void;
  /** True in the process that must stop at the crash point. */
  victim: boolean;
  /** Only a child process may SIGKILL itself (the poison action). */
  allowSelfKill?: boolean;
}

let config: CrashConfig | undefined;

/** Sets this process's configuration; call before any worker starts. */
export function configureCrash(c: CrashConfig): void {
  config = c;
}

function cfg(): CrashConfig {
  if (!config) throw new Error('crash-workflows: configureCrash() was not called in this process');
  return config;
}

/** The file whose creation releases the stalled victim ('a') or the rescuer ('b') (stall mode). */
export const goFile = (runId: string, who: 'a' | 'b') =>
  join(tmpdir(), `cyclone-crash-go-${runId}-${who}`);

/**
 * Blocks the whole thread (a stalled process: no timers, no heartbeats, no I/O) until `file`
 * exists.
 */
function blockUntil(file: string): void {
  const cell = new Int32Array(new SharedArrayBuffer(4));
  while (!existsSync(file)) Atomics.wait(cell, 0, 0, 10);
}

/** Waits for `file` without blocking: timers, heartbeats included, keep running. */
async function waitForFile(file: string): Promise<void> {
  while (!existsSync(file)) await new Promise((r) => setTimeout(r, 20));
}

/** A promise that never settles: the handler stays "inside" the step until the process dies. */
const forever = () => new Promise<never>(() => {});

/**
 * The instrumentation tables (public schema of the test database). None has a unique
 * constraint except `effects_keyed`, whose key is the idempotency key `${runId}:${node}`.
 */
export const CRASH_TABLES = `
CREATE TABLE IF NOT EXISTS invocations (
  id bigserial PRIMARY KEY, run_id uuid NOT NULL, node text NOT NULL, attempt int NOT NULL,
  pid int NOT NULL,
  at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE TABLE IF NOT EXISTS business (
  id bigserial PRIMARY KEY, run_id uuid NOT NULL, node text NOT NULL, attempt int NOT NULL,
  pid int NOT NULL);
CREATE TABLE IF NOT EXISTS effects_raw (
  id bigserial PRIMARY KEY, key text NOT NULL, run_id uuid NOT NULL, node text NOT NULL,
  attempt int NOT NULL, pid int NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE TABLE IF NOT EXISTS effects_keyed (
  key text PRIMARY KEY, attempt int NOT NULL, pid int NOT NULL);
`;

/** Records one handler invocation with the identity the handler saw (ctx.runId, ctx.node). */
async function recordInvocation(ctx: Context): Promise<void> {
  await cfg().pool.query(
    'INSERT INTO invocations (run_id, node, attempt, pid) VALUES ($1, $2, $3, $4)',
    [ctx.runId, ctx.node, ctx.attempt, process.pid],
  );
}

/** The business write, on the step's completion transaction: commits with the step or never. */
async function businessWrite(ctx: Context): Promise<void> {
  const tx = await ctx.completionTx();
  await tx.query('INSERT INTO business (run_id, node, attempt, pid) VALUES ($1, $2, $3, $4)', [
    ctx.runId,
    ctx.node,
    ctx.attempt,
    process.pid,
  ]);
}

/**
 * The "external" side effect, outside Postgres' completion transaction (a plain pool query that
 * commits at once): once raw (a provider without a key), once keyed by `(runId, node)` with
 * `ON CONFLICT DO NOTHING` (a provider honouring an idempotency key).
 */
async function externalEffect(ctx: Context): Promise<void> {
  const key = `${ctx.runId}:${ctx.node}`;
  const { pool } = cfg();
  await pool.query(
    'INSERT INTO effects_raw (key, run_id, node, attempt, pid) VALUES ($1, $2, $3, $4, $5)',
    [key, ctx.runId, ctx.node, ctx.attempt, process.pid],
  );
  await pool.query(
    'INSERT INTO effects_keyed (key, attempt, pid) VALUES ($1, $2, $3) ON CONFLICT (key) DO NOTHING',
    [key, ctx.attempt, process.pid],
  );
}

const crashStep = newAction(
  'crash_step',
  async (ctx: Context, input: CrashInput) => {
    const c = cfg();
    await recordInvocation(ctx);
    const hold = c.victim && ctx.attempt === 1;
    if (hold && input.crash === 'before_effect') {
      c.emit(`BEFORE_EFFECT ${ctx.runId} ${ctx.node} ${ctx.attempt}`);
      return forever();
    }
    if (hold && input.crash === 'after_commit' && ctx.node === 'second') {
      c.emit(`HOLDING_NEXT ${ctx.runId} ${ctx.node} ${ctx.attempt}`);
      return forever();
    }
    await businessWrite(ctx);
    if (input.crash === 'throw' && ctx.attempt === 1) {
      throw new Error(`crash-test: attempt ${ctx.attempt} throws after its completionTx write`);
    }
    await externalEffect(ctx);
    if (hold && input.crash === 'after_effect') {
      c.emit(`AFTER_EFFECT ${ctx.runId} ${ctx.node} ${ctx.attempt}`);
      return forever();
    }
    if (input.crash === 'stall' && !hold) {
      c.emit(`WAITING ${ctx.runId} ${ctx.node} ${ctx.attempt}`);
      await waitForFile(goFile(ctx.runId, 'b'));
    }
    if (hold && input.crash === 'stall') {
      c.emit(`STALLED ${ctx.runId} ${ctx.node} ${ctx.attempt}`);
      blockUntil(goFile(ctx.runId, 'a'));
      // Returns without yielding to the event loop: the worker attempts the completion before
      // any heartbeat can notice the lost lease, so the completion fence itself must refuse it.
      c.emit(`RESUMED ${ctx.runId} ${ctx.node} ${ctx.attempt}`);
    }
    return { attempt: ctx.attempt, pid: process.pid };
  },
  { maxAttempts: 5, backoff: () => 100 },
);

/** One node, `step`. Matrix rows 1, 2, 4 and 5. */
export const CrashFlow = newWorkflow<CrashInput>('crash_flow', {
  nodes: { step: { action: crashStep } },
});

/** `first` → `second`. Matrix row 3 (stop after `first`'s completion commit). */
export const ChainFlow = newWorkflow<CrashInput>('crash_chain', {
  nodes: {
    first: { action: crashStep },
    second: { action: crashStep, after: ['first'] },
  },
});

/** Attempts of the poison step. */
export const POISON_MAX_ATTEMPTS = 3;

/** A step that SIGKILLs the process running it, on every attempt. */
const poisonStep = newAction(
  'poison_step',
  async (ctx: Context) => {
    const c = cfg();
    await recordInvocation(ctx);
    if (!c.allowSelfKill) throw new Error('poison_step must only run in a child worker process');
    c.emit(`POISON ${ctx.runId} ${ctx.node} ${ctx.attempt}`);
    process.kill(process.pid, 'SIGKILL');
    return forever();
  },
  { maxAttempts: POISON_MAX_ATTEMPTS, backoff: () => 0 },
);

export const PoisonFlow = newWorkflow('crash_poison', {
  nodes: { step: { action: poisonStep } },
});

/** Sleeps `ms` (ignoring ctx.signal), recording its invocation and whether it was aborted. */
const slowStep = newAction(
  'slow_step',
  async (ctx: Context, input: { ms: number }) => {
    await recordInvocation(ctx);
    await new Promise((r) => setTimeout(r, input.ms));
    const tx = await ctx.completionTx();
    await tx.query('INSERT INTO business (run_id, node, attempt, pid) VALUES ($1, $2, $3, $4)', [
      ctx.runId,
      ctx.node,
      ctx.attempt,
      process.pid,
    ]);
    return { attempt: ctx.attempt, aborted: ctx.signal.aborted };
  },
  { maxAttempts: 5, backoff: () => 0 },
);

export const SlowFlow = newWorkflow<{ ms: number }>('crash_slow', {
  nodes: { step: { action: slowStep } },
});

/** Everything a crash child worker registers. */
export const CRASH_WORKFLOWS = [CrashFlow, ChainFlow, PoisonFlow] as const;
