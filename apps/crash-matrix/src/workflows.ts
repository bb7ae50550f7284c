/**
 * The workflows the crash matrix runs, and how their handlers let us watch them.
 *
 * Every handler records what it does in plain tables (schema `crash_matrix_obs`):
 * - `invocations`: each time a handler starts (run, node, attempt, pid, time);
 * - `business`: a row written on `ctx.completionTx()`: it commits with the step or not at all;
 * - `effects_raw`: the "external side effect", committed at once, outside that transaction, as a
 *   call to another system would be — no deduplication, so every attempt that gets there shows;
 * - `effects_keyed`: the same effect deduplicated by the step's key `${runId}:${node}` (`ON
 *   CONFLICT DO NOTHING`), as a provider honouring an idempotency key would.
 *
 * In the *victim* worker process, the handler stops at the point its scenario names — and the
 * parent SIGKILLs it there, or lets it stall past its lease.
 */
import { existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Context, newAction, newWorkflow } from '@cyclone/core';
import type pg from 'pg';

/** The Cyclone schema of the crash matrix (its own, so nothing else's runs get in the way). */
export const ENGINE_SCHEMA = 'crash_matrix';

/** Where the victim stops (see `crashStep`). */
export type Scenario = 'before_effect' | 'after_effect' | 'after_commit' | 'stall' | 'throw';

export interface ScenarioInput {
  scenario: Scenario;
}

export const OBSERVATION_TABLES = `
CREATE SCHEMA IF NOT EXISTS crash_matrix_obs;
CREATE TABLE IF NOT EXISTS crash_matrix_obs.invocations (
  id bigserial PRIMARY KEY, run_id uuid NOT NULL, node text NOT NULL, attempt int NOT NULL,
  pid int NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE TABLE IF NOT EXISTS crash_matrix_obs.business (
  id bigserial PRIMARY KEY, run_id uuid NOT NULL, node text NOT NULL, attempt int NOT NULL,
  pid int NOT NULL);
CREATE TABLE IF NOT EXISTS crash_matrix_obs.effects_raw (
  id bigserial PRIMARY KEY, run_id uuid NOT NULL, node text NOT NULL, attempt int NOT NULL,
  pid int NOT NULL);
CREATE TABLE IF NOT EXISTS crash_matrix_obs.effects_keyed (
  key text PRIMARY KEY, attempt int NOT NULL, pid int NOT NULL);
`;

/** What a worker process gives the handlers. */
export interface Probe {
  /** A plain pool: writes on it commit at once (outside the completion transaction). */
  pool: pg.Pool;
  /** Tells the parent something: a line on stdout. */
  emit: (line: string) => void;
  /** True in the process that must stop at the scenario's point. */
  victim: boolean;
}

let probe: Probe | undefined;

/** Sets this process's probe; call before the worker starts. */
export function useProbe(p: Probe): void {
  probe = p;
}

function p(): Probe {
  if (!probe) throw new Error('useProbe() was not called in this process');
  return probe;
}

/** The file whose creation releases the stalled victim (`a`) or the second worker (`b`). */
export const releaseFile = (runId: string, who: 'a' | 'b') =>
  join(tmpdir(), `cyclone-crash-matrix-${runId}-${who}`);

/** Blocks the whole thread (no timers, no heartbeats: a stalled process) until `file` exists. */
function blockUntil(file: string): void {
  const cell = new Int32Array(new SharedArrayBuffer(4));
  while (!existsSync(file)) Atomics.wait(cell, 0, 0, 10);
}

/** Waits for `file` without blocking: heartbeats go on. */
async function waitFor(file: string): Promise<void> {
  while (!existsSync(file)) await new Promise((r) => setTimeout(r, 20));
}

/** A promise that never settles: the handler stays inside the step until its process dies. */
const forever = () => new Promise<never>(() => {});

const say = (ctx: Context, what: string) =>
  p().emit(`${what} ${ctx.runId} ${ctx.node} ${ctx.attempt}`);

async function recordInvocation(ctx: Context): Promise<void> {
  await p().pool.query(
    'INSERT INTO crash_matrix_obs.invocations (run_id, node, attempt, pid) VALUES ($1, $2, $3, $4)',
    [ctx.runId, ctx.node, ctx.attempt, process.pid],
  );
}

async function businessWrite(ctx: Context): Promise<void> {
  const tx = await ctx.completionTx();
  await tx.query(
    'INSERT INTO crash_matrix_obs.business (run_id, node, attempt, pid) VALUES ($1, $2, $3, $4)',
    [ctx.runId, ctx.node, ctx.attempt, process.pid],
  );
}

async function externalEffect(ctx: Context): Promise<void> {
  const { pool } = p();
  await pool.query(
    'INSERT INTO crash_matrix_obs.effects_raw (run_id, node, attempt, pid) VALUES ($1, $2, $3, $4)',
    [ctx.runId, ctx.node, ctx.attempt, process.pid],
  );
  await pool.query(
    `INSERT INTO crash_matrix_obs.effects_keyed (key, attempt, pid) VALUES ($1, $2, $3)
     ON CONFLICT (key) DO NOTHING`,
    [`${ctx.runId}:${ctx.node}`, ctx.attempt, process.pid],
  );
}

/**
 * The step: record the invocation, write the business row on the completion transaction, make
 * the external effect, return. Where the victim stops, by scenario (first attempt only):
 * - `before_effect`: right after recording the invocation (row 1);
 * - `after_effect`: after the business write and the external effect, before the completion
 *   commits (row 2);
 * - `after_commit`: node `first` completes; the victim then holds node `second` (row 3);
 * - `stall`: after the effect, the victim blocks its event loop until released (row 4); a later
 *   attempt (the other worker's) waits, without blocking, until it is released too;
 * - `throw`: attempt 1 throws after its business write, in any worker (row 5).
 */
const crashStep = newAction(
  'crash_step',
  async (ctx: Context, input: ScenarioInput) => {
    await recordInvocation(ctx);
    const hold = p().victim && ctx.attempt === 1;
    if (hold && input.scenario === 'before_effect') {
      say(ctx, 'BEFORE_EFFECT');
      return forever();
    }
    if (hold && input.scenario === 'after_commit' && ctx.node === 'second') {
      say(ctx, 'HOLDING');
      return forever();
    }
    await businessWrite(ctx);
    if (input.scenario === 'throw' && ctx.attempt === 1) {
      throw new Error(`attempt ${ctx.attempt} throws after its completionTx write`);
    }
    await externalEffect(ctx);
    if (hold && input.scenario === 'after_effect') {
      say(ctx, 'AFTER_EFFECT');
      return forever();
    }
    if (hold && input.scenario === 'stall') {
      say(ctx, 'STALLED');
      blockUntil(releaseFile(ctx.runId, 'a'));
      // Returns without yielding to the event loop: the worker tries to complete before any
      // heartbeat could learn that the lease is gone, so the completion fence must refuse it.
      say(ctx, 'RESUMED');
    } else if (input.scenario === 'stall') {
      say(ctx, 'WAITING');
      await waitFor(releaseFile(ctx.runId, 'b'));
    }
    return { attempt: ctx.attempt, pid: process.pid };
  },
  // A 1 s backoff after a failure, so the `retryable` state can be seen before the retry.
  { maxAttempts: 5, backoff: () => 1_000 },
);

/** One node, `step`: rows 1, 2, 4 and 5. */
export const OneStep = newWorkflow<ScenarioInput>('crash_one_step', {
  nodes: { step: { action: crashStep } },
});

/** `first` → `second`: row 3. */
export const TwoSteps = newWorkflow<ScenarioInput>('crash_two_steps', {
  nodes: {
    first: { action: crashStep },
    second: { action: crashStep, after: ['first'] },
  },
});
