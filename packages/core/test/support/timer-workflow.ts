/**
 * The workflow of timer.crash.test.ts, shared by the test (it submits runs) and the child worker
 * script (timer-worker.ts, which runs them): `a`, then `b` on a durable node timer of
 * `TIMER_DELAY_MS`. `b` records each call of its handler in `timer_effects`, whose primary key
 * `(run_id, node)` makes a second call fail loudly instead of passing unseen.
 */
import type pg from 'pg';
import { newAction, newWorkflow } from '../../src/index.js';

/** How long `b` waits after `a` completed. */
export const TIMER_DELAY_MS = 3_000;

/** The side table of `b`'s handler (public schema of the test's own server). */
export const TIMER_TABLES = `
CREATE TABLE IF NOT EXISTS timer_effects (
  run_id uuid NOT NULL, node text NOT NULL, pid int NOT NULL, attempt int NOT NULL,
  at timestamptz NOT NULL DEFAULT clock_timestamp(),
  PRIMARY KEY (run_id, node));
`;

interface TimerConfig {
  /** A plain pool: `b`'s write commits at once, outside the completion transaction. */
  pool: pg.Pool;
  /** Tells the parent something (a line on stdout). */
  emit: (line: string) => void;
}

let config: TimerConfig | undefined;

/** Sets this process's pool and line writer; call before the worker starts. */
export function configureTimer(c: TimerConfig): void {
  config = c;
}

function cfg(): TimerConfig {
  if (!config) throw new Error('timer-workflow: configureTimer() was not called in this process');
  return config;
}

const First = newAction('timer_crash_a', async (ctx) => {
  cfg().emit(`A ${ctx.runId} ${process.pid}`);
  return { a: process.pid };
});

const Second = newAction('timer_crash_b', async (ctx) => {
  await cfg().pool.query(
    'INSERT INTO timer_effects (run_id, node, pid, attempt) VALUES ($1, $2, $3, $4)',
    [ctx.runId, ctx.node, process.pid, ctx.attempt],
  );
  cfg().emit(`B ${ctx.runId} ${process.pid}`);
  return { b: process.pid };
});

/**
 * `a` → `w` (a wait node for signal `go`, no timeout) → `c`, which records its call in
 * `timer_effects` as `b` does: a pending wait holds no worker, so killing every worker and
 * restarting the server must change nothing.
 */
export const WaitFlow = newWorkflow('timer_crash_wait', {
  nodes: {
    a: { action: First },
    w: { waitFor: 'go', after: ['a'] },
    c: { action: Second, after: ['w'] },
  },
});

/** `a` → `b`, `b` claimable `TIMER_DELAY_MS` after `a` completed. */
export const TimerFlow = newWorkflow('timer_crash', {
  nodes: {
    a: { action: First },
    b: { action: Second, after: ['a'], delayMs: TIMER_DELAY_MS },
  },
});
