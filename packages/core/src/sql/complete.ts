/**
 * The completion and the failure of a step: the fenced transitions that record an attempt's
 * outcome, and move the join counters and the run's counters in the same statement.
 *
 * Counters on the run row (`steps_remaining`, `steps_active`) are changed in the same statement
 * as the step transition that moves them, under the run row's lock, so two upstream nodes
 * finishing at once never both miss a join and a run is completed (or failed) exactly once.
 */

import { completionArrays } from './array-literal.js';
import { runStepDiscardedSql } from './discard.js';
import type { StepAttempt } from './heartbeat.js';
import { defineStatement, type Queryable, type SqlScope, send } from './statement.js';

/**
 * Completes steps in one statement: a batch of steps that opened no `completionTx` (group
 * commit: one statement for many steps), or one step on its handler's `completionTx`. Each step is fenced on its own (`state = 'running' AND attempt = <its attempt>`);
 * downstream counters and run counters are moved by the sum over the batch, so two upstream
 * nodes of one join completing in the same batch release it once. The batch may touch several
 * runs: a deliberate exception to the one-run rule for throughput; it is one atomic statement,
 * and a deadlock with another batch rolls it back whole, to be retried.
 * $1 run_ids, $2 nodes, $3 attempts, $4 outputs (jsonb[]), $5 channel.
 * Returns one row per step completed (run_id, node, attempt); a step missing from the result was
 * fenced out (the same node may be in a batch twice, at an old and a new attempt).
 */
export const completeStepsSql = (s: string) => completeFrom(s, BATCH_INPUT);

/**
 * `completeBatch` for exactly one step, with scalar parameters: $1 run_id, $2 node, $3 attempt,
 * $4 output jsonb, $5 channel. The same transition; used on a handler's `completionTx` and for a
 * batch of one. With array parameters PostgreSQL plans every execution again (a generic plan of
 * `unnest($1)` is costed for 10 rows, so the per-call custom plan always looks cheaper); this
 * form's generic plan is kept after five executions (test/prepared.test.ts checks it; bench
 * scenario 4 measures the difference).
 */
export const completeStepSql = (s: string) => completeFrom(s, ONE_INPUT);

/**
 * `completeStepsSql` for a batch whose steps are all leaves (their node has no downstream node,
 * the claim's `leaf`): the same fence, run counters, run transitions, lock order (step rows,
 * then run rows in id order) and result, without the downstream CTEs and the NOTIFY, since a
 * leaf releases nothing. $1 run_ids, $2 nodes, $3 attempts, $4 outputs (jsonb[]): no channel.
 * See `completeLeafFrom`.
 */
export const completeStepsLeafSql = (s: string) => completeLeafFrom(s, BATCH_INPUT);

/**
 * `completeStepSql` for one leaf step (see `completeStepsLeafSql`): $1 run_id, $2 node,
 * $3 attempt, $4 output jsonb. Its generic plan is kept too (test/prepared.test.ts).
 */
export const completeStepLeafSql = (s: string) => completeLeafFrom(s, ONE_INPUT);

const BATCH_INPUT = `SELECT * FROM unnest($1::uuid[], $2::text[], $3::int[], $4::jsonb[])
    AS i(run_id, node, attempt, output)`;
const ONE_INPUT = `SELECT $1::uuid AS run_id, $2::text AS node, $3::int AS attempt,
    $4::jsonb AS output`;

/**
 * What the `released` UPDATE adds to its join for `input`: with one step, the run $1 that all
 * the nodes it releases belong to, so that the UPDATE reads that run's rows by the primary key.
 * Without it a generic plan made while the tables were empty (a new schema: the step pool keeps
 * the server's planner settings) joined the released nodes by a Hash Join over a Seq Scan of
 * every step: 55–166 ms a completion at 200,000 steps.
 */
const releasedRun = (input: typeof BATCH_INPUT | typeof ONE_INPUT) =>
  input === ONE_INPUT ? ' AND t.run_id = $1::uuid' : '';

/**
 * The fenced step transition both completion forms start with (their `done` CTE): each step of
 * `input` still `running` at its attempt moves to `to`, its lease cleared; `returning` is
 * FULL_RETURNING or LEAF_RETURNING.
 */
const doneUpdate = (
  s: string,
  to: typeof COMPLETED | typeof SKIPPED,
  returning: typeof FULL_RETURNING | typeof LEAF_RETURNING,
) => `UPDATE ${s}.cyclone_steps t
  SET state = ${to}, output = i.output, completed_at = now(), updated_at = now(),
      lease_owner = NULL, lease_expires_at = NULL
  FROM input i
  WHERE t.run_id = i.run_id AND t.node = i.node AND t.attempt = i.attempt AND t.state = 'running'
  RETURNING ${returning}`;
/** The full form's `done` rows: with the downstream nodes to release. */
const FULL_RETURNING = 't.run_id, t.node, t.attempt, t.downstream';
/**
 * The leaf form's `done` rows; a step that has downstream nodes after all fails the statement
 * (see `completeLeafFrom`).
 */
const LEAF_RETURNING = `t.run_id, t.node,
    CASE WHEN cardinality(t.downstream) = 0 THEN t.attempt
         ELSE ('cyclone: leaf completion of step ' || t.node || ' of run ' || t.run_id
               || ', which has downstream nodes')::int END AS attempt`;

/** The completion statement over the steps `input` selects (BATCH_INPUT or ONE_INPUT). */
const completeFrom = (
  s: string,
  input: typeof BATCH_INPUT | typeof ONE_INPUT,
  extra: typeof NO_EXTRA | typeof IDLE_LIMIT = NO_EXTRA,
  to: typeof COMPLETED | typeof SKIPPED = COMPLETED,
  from: typeof FROM_DONE | typeof FROM_DONE_OR_FENCED_OUT = FROM_DONE,
) => `
WITH input AS (
  ${input}
), done AS (
  ${doneUpdate(s, to, FULL_RETURNING)}
), edges AS (
  SELECT d.run_id, x.node, count(*)::int AS n
  FROM done d, unnest(d.downstream) AS x(node)
  GROUP BY d.run_id, x.node
  -- Lock order (no deadlock between two completions of one join): the downstream rows are
  -- updated, so locked, in (run_id, node) order (a nested loop over this ordered CTE, checked
  -- by test/prepared.test.ts), all of them before any run row, and the run rows in id order.
  -- Explicit FOR UPDATE locks would do the same at the cost of a second write per row
  -- (measured by bench/: no-op throughput 32,000 → 14,000 runs/s).
  ORDER BY d.run_id, x.node
), released AS (
  UPDATE ${s}.cyclone_steps t
  SET deps_remaining = t.deps_remaining - e.n,
      -- A node with a timer waits 'scheduled' for delay_ms after its last upstream completed. A
      -- wait node is due at once: its step evaluates its condition, then waits (parked, see
      -- snoozeStepSql) until its signal or its deadline, which starts now.
      state = CASE WHEN t.deps_remaining = e.n AND t.state = 'pending'
                   THEN CASE WHEN t.delay_ms > 0 THEN 'scheduled' ELSE 'available' END
                   ELSE t.state END,
      scheduled_at = CASE WHEN t.deps_remaining = e.n
                          THEN now() + make_interval(secs => t.delay_ms::double precision / 1000)
                          ELSE t.scheduled_at END,
      wait_deadline = CASE WHEN t.deps_remaining = e.n AND t.wait_for IS NOT NULL
        THEN now() + make_interval(secs => t.wait_timeout_ms::double precision / 1000)
        ELSE t.wait_deadline END,
      updated_at = now()
  FROM edges e WHERE t.run_id = e.run_id AND t.node = e.node${releasedRun(input)}
  RETURNING t.run_id, t.state, t.workflow
), per_run AS (
  SELECT d.run_id, count(*)::int AS completed,
         (SELECT count(*) FROM released r
          WHERE r.run_id = d.run_id AND r.state IN ('available', 'scheduled'))::int
           AS released
  FROM done d GROUP BY d.run_id
  -- Run rows in id order; per_run counts the released rows, so they all come after those.
  ORDER BY d.run_id
), runs AS (
  UPDATE ${s}.cyclone_runs r
  SET steps_remaining = r.steps_remaining - p.completed,
      steps_active = r.steps_active - p.completed + p.released,
      state = CASE
        WHEN r.state <> 'running' THEN r.state
        WHEN r.steps_remaining = p.completed THEN 'completed'
        WHEN r.steps_active - p.completed + p.released = 0 THEN 'failed'
        ELSE r.state END,
      completed_at = CASE WHEN r.state = 'running' AND (r.steps_remaining = p.completed
        OR r.steps_active - p.completed + p.released = 0) THEN now() ELSE r.completed_at END,
      updated_at = now()
  FROM per_run p WHERE r.id = p.run_id
  RETURNING r.id
)
SELECT d.run_id, d.node, d.attempt,
  (SELECT count(pg_notify($5, w.workflow))
   FROM (SELECT DISTINCT workflow FROM released WHERE state IN ('available', 'scheduled')) w)::int
  AS notified${extra}
${from(s)}`;

/**
 * The completion of leaf steps over the steps `input` selects: `completeFrom` with no downstream
 * node to release, so no `edges`/`released` CTEs and no NOTIFY (`notified` is 0), and no channel
 * parameter: $1–$4 as there, then the idle limit as $5 (`LEAF_IDLE_LIMIT`). The fence is
 * the full form's alone, so a step it does not match was fenced out, as there. A matched step
 * that has downstream nodes after all (a caller that passed a wrong `leaf`) makes the statement
 * fail, so nothing of it applies (its ELSE casts text to int: no function, no migration): a
 * filter in the fence would drop that step's row instead, and a dropped row reads as a
 * fence-out.
 */
const completeLeafFrom = (
  s: string,
  input: typeof BATCH_INPUT | typeof ONE_INPUT,
  extra: typeof NO_EXTRA | typeof LEAF_IDLE_LIMIT = NO_EXTRA,
  to: typeof COMPLETED | typeof SKIPPED = COMPLETED,
  from: typeof FROM_DONE | typeof FROM_DONE_OR_FENCED_OUT = FROM_DONE,
) => `
WITH input AS (
  ${input}
), done AS (
  ${doneUpdate(s, to, LEAF_RETURNING)}
), per_run AS (
  SELECT d.run_id, count(*)::int AS completed
  FROM done d GROUP BY d.run_id
  -- Run rows in id order, after every step row (done), as in the full form.
  ORDER BY d.run_id
), runs AS (
  UPDATE ${s}.cyclone_runs r
  SET steps_remaining = r.steps_remaining - p.completed,
      steps_active = r.steps_active - p.completed,
      state = CASE
        WHEN r.state <> 'running' THEN r.state
        WHEN r.steps_remaining = p.completed THEN 'completed'
        WHEN r.steps_active - p.completed = 0 THEN 'failed'
        ELSE r.state END,
      completed_at = CASE WHEN r.state = 'running' AND (r.steps_remaining = p.completed
        OR r.steps_active - p.completed = 0) THEN now() ELSE r.completed_at END,
      updated_at = now()
  FROM per_run p WHERE r.id = p.run_id
)
SELECT d.run_id, d.node, d.attempt, 0 AS notified${extra}
${from(s)}`;

/**
 * Records a failed attempt, fenced like `complete`: `retryable` at now() + $5 ms, or `discarded`
 * when $6 (non-retryable) or `attempt >= max_attempts`. A discard moves the run's counters and
 * fails the run when nothing is left that can progress.
 * $1 run_id, $2 node, $3 attempt, $4 error entry jsonb, $5 delay ms, $6 non-retryable,
 * $7 channel, $8 workflow, $9 attempts given back (1 when the attempt was cut short by a
 * worker's stop, so a routine deploy never uses up a step's budget; else 0). Returns no row
 * when the fence did not match.
 */
export const failStepSql = (s: string) => `
WITH f AS (
  UPDATE ${s}.cyclone_steps
  SET state = CASE WHEN $6::boolean OR attempt >= max_attempts + $9::int THEN 'discarded'
                   ELSE 'retryable' END,
      max_attempts = max_attempts + $9::int,
      scheduled_at = now() + make_interval(secs => $5::double precision / 1000),
      errors = errors || jsonb_build_array($4::jsonb),
      lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
  WHERE run_id = $1 AND node = $2 AND attempt = $3 AND state = 'running'
  RETURNING state
), run AS (
  ${runStepDiscardedSql(s)}
  FROM f WHERE r.id = $1 AND f.state = 'discarded'
  RETURNING r.state
)
SELECT f.state AS step_state, (SELECT state FROM run) AS run_state,
       CASE WHEN f.state = 'retryable' AND $5::double precision <= 0 THEN pg_notify($7, $8) END AS notified
FROM f`;

/**
 * `completeStep` on a handler's `completionTx`, which also limits how long the transaction may
 * then sit idle on the server: $6 ms (`idle_in_transaction_session_timeout`, local to the
 * transaction). Between this statement and the COMMIT the step's row is locked; if the worker is
 * cut off in that gap (a partition, a host that dies, a proxy that keeps the TCP peer alive), the
 * server ends the session after $6 ms, its locks go, and the recovery sweep, which skips locked
 * rows, can take the step over. Set in the same statement, so no round trip is added. Fenced
 * out, it raises (SQLSTATE `FENCED_OUT`) instead of returning no row: the worker sends its COMMIT
 * in the same write without waiting for this answer, and that COMMIT must then roll back.
 */
export const completeStepOnTxSql = (s: string) =>
  completeFrom(s, ONE_INPUT, IDLE_LIMIT, COMPLETED, FROM_DONE_OR_FENCED_OUT);

/**
 * `completeStepOnTxSql` for a leaf step (see `completeStepsLeafSql`): $1–$4 as
 * `completeStepLeafSql`, $5 the idle limit in ms.
 */
export const completeStepOnTxLeafSql = (s: string) =>
  completeLeafFrom(s, ONE_INPUT, LEAF_IDLE_LIMIT, COMPLETED, FROM_DONE_OR_FENCED_OUT);

/** The completed steps, one row each: the result of every form but the completionTx's. */
const FROM_DONE = (_s: string) => 'FROM done d';
/**
 * The completionTx form's result: its one step's row, or, when the fence matched no row, an
 * error (`cyclone_fenced_out`, SQLSTATE `FENCED_OUT`) instead of no row, so that a COMMIT sent
 * behind it unanswered rolls back. A CASE, so the function runs only when no row was done.
 */
const FROM_DONE_OR_FENCED_OUT = (s: string) => `FROM (SELECT) AS one LEFT JOIN done d ON true
WHERE CASE WHEN d.run_id IS NULL THEN ${s}.cyclone_fenced_out($1, $2, $3) ELSE true END`;

/** The SQLSTATE the completion on a completionTx raises when fenced out (migration 000013). */
export const FENCED_OUT = 'YC001';

/** True for the error of a completion on a completionTx that was fenced out. */
export function isFencedOut(err: unknown): boolean {
  return (err as { code?: unknown } | null | undefined)?.code === FENCED_OUT;
}

const NO_EXTRA = '';
const COMPLETED = `'completed'`;
const SKIPPED = `'skipped'`;

/**
 * A conditional node whose condition is false: the same transition as `completeStepSql` to
 * `skipped` (output null), which counts as done for its downstream nodes and for the run.
 * $1 run_id, $2 node, $3 attempt, $4 output (null), $5 channel.
 */
export const skipStepSql = (s: string) => completeFrom(s, ONE_INPUT, NO_EXTRA, SKIPPED);
/** `skipStepSql` for a leaf step (see `completeStepsLeafSql`): $1–$4 as there, no channel. */
export const skipStepLeafSql = (s: string) => completeLeafFrom(s, ONE_INPUT, NO_EXTRA, SKIPPED);
const skipStepStatement = defineStatement('skip_step', skipStepSql);
const skipStepLeafStatement = defineStatement('skip_step_leaf', skipStepLeafSql);

/**
 * Ends a step `skipped`, fenced on its attempt (its condition was false); in the leaf form when
 * `leaf` is true.
 * @returns `[step]` when recorded, `[]` when fenced out.
 */
export async function skipStep(
  on: Queryable,
  db: SqlScope,
  p: { runId: string; node: string; attempt: number; leaf?: boolean },
): Promise<StepAttempt[]> {
  const { rows } =
    p.leaf === true
      ? await send<StepAttempt>(on, skipStepLeafStatement(db), [p.runId, p.node, p.attempt, 'null'])
      : await send<StepAttempt>(on, skipStepStatement(db), [
          p.runId,
          p.node,
          p.attempt,
          'null',
          db.channel,
        ]);
  return rows;
}
const IDLE_LIMIT = `,
  set_config('idle_in_transaction_session_timeout', $6::text, true) AS idle_limit`;
/** `IDLE_LIMIT` of the leaf form, which takes no channel: the limit is its $5. */
const LEAF_IDLE_LIMIT = `,
  set_config('idle_in_transaction_session_timeout', $5::text, true) AS idle_limit`;

const completeStepsStatement = defineStatement('complete_steps', completeStepsSql);
const completeStepStatement = defineStatement('complete_step', completeStepSql);
const completeStepOnTxStatement = defineStatement('complete_step_on_tx', completeStepOnTxSql);
const completeStepsLeafStatement = defineStatement('complete_steps_leaf', completeStepsLeafSql);
const completeStepLeafStatement = defineStatement('complete_step_leaf', completeStepLeafSql);
const completeStepOnTxLeafStatement = defineStatement(
  'complete_step_on_tx_leaf',
  completeStepOnTxLeafSql,
);
const failStepStatement = defineStatement('fail_step', failStepSql);

/** A step's completion: its identity, the attempt that completes it and its output. */
export interface StepCompletion {
  runId: string;
  node: string;
  attempt: number;
  /** The output as JSON text. */
  output: string;
  /**
   * True when the step's node has no downstream node (the claim's `leaf`, read from the step
   * row): completed by the cheaper leaf form. Absent counts as false (the full form).
   */
  readonly leaf?: boolean;
}

/**
 * Completes a batch of steps in one statement, each fenced on its attempt: in the leaf form when
 * every step is a leaf, else in the full form.
 * @returns the steps completed; one missing was fenced out.
 */
export async function completeSteps(
  on: Queryable,
  db: SqlScope,
  steps: readonly StepCompletion[],
): Promise<StepAttempt[]> {
  // Sent as array literals built in one pass (cheaper than pg's per-element serialization).
  const a = completionArrays(steps);
  const { rows } = allLeaves(steps)
    ? await send<StepAttempt>(on, completeStepsLeafStatement(db), [
        a.runIds,
        a.nodes,
        a.attempts,
        a.outputs,
      ])
    : await send<StepAttempt>(on, completeStepsStatement(db), [
        a.runIds,
        a.nodes,
        a.attempts,
        a.outputs,
        db.channel,
      ]);
  return rows;
}

/** True when every step is a leaf (`StepCompletion.leaf`): the batch may take the leaf form. */
function allLeaves(steps: readonly StepCompletion[]): boolean {
  for (const p of steps) if (p.leaf !== true) return false;
  return true;
}

/**
 * Completes one step, fenced on its attempt (the scalar form: on a handler's `completionTx`, and
 * for a batch of one), in the leaf form when `leaf` is true.
 * @returns `[step]` when completed, `[]` when fenced out.
 */
export async function completeStep(
  on: Queryable,
  db: SqlScope,
  p: StepCompletion,
): Promise<StepAttempt[]> {
  const { rows } =
    p.leaf === true
      ? await send<StepAttempt>(on, completeStepLeafStatement(db), [
          p.runId,
          p.node,
          p.attempt,
          p.output,
        ])
      : await send<StepAttempt>(on, completeStepStatement(db), [
          p.runId,
          p.node,
          p.attempt,
          p.output,
          db.channel,
        ]);
  return rows;
}

/**
 * Completes one step on its handler's transaction, fenced on its attempt, and limits the
 * transaction's idle time on the server to `idleLimitMs` until it ends (see `completeStepOnTxSql`);
 * in the leaf form when `leaf` is true.
 * @returns `[step]` when completed.
 * @throws an error with code `FENCED_OUT` (`isFencedOut`) when fenced out; the transaction is
 * then aborted.
 */
export async function completeStepOnTx(
  on: Queryable,
  db: SqlScope,
  p: StepCompletion & { idleLimitMs: number },
): Promise<StepAttempt[]> {
  const idleLimit = String(Math.max(1, Math.ceil(p.idleLimitMs)));
  const { rows } =
    p.leaf === true
      ? await send<StepAttempt>(on, completeStepOnTxLeafStatement(db), [
          p.runId,
          p.node,
          p.attempt,
          p.output,
          idleLimit,
        ])
      : await send<StepAttempt>(on, completeStepOnTxStatement(db), [
          p.runId,
          p.node,
          p.attempt,
          p.output,
          db.channel,
          idleLimit,
        ]);
  return rows;
}

/** What `failStep` did: the step's new state, and the run's when the run failed with it. */
export interface FailedStep {
  step_state: 'retryable' | 'discarded';
  run_state: string | null;
}

/**
 * Records a failed attempt, fenced on it.
 * @returns `[row]` when recorded, `[]` when fenced out (the lease was lost).
 */
export async function failStep(
  on: Queryable,
  db: SqlScope,
  p: {
    runId: string;
    node: string;
    attempt: number;
    /** The error entry as JSON text. */
    entry: string;
    /** Delay before the next attempt, ms. */
    delayMs: number;
    nonRetryable: boolean;
    workflow: string;
    /** Give the attempt back: the attempt was cut short by something not the handler's doing. */
    refundAttempt: boolean;
  },
): Promise<FailedStep[]> {
  const { rows } = await send<FailedStep>(on, failStepStatement(db), [
    p.runId,
    p.node,
    p.attempt,
    p.entry,
    p.delayMs,
    p.nonRetryable,
    db.channel,
    p.workflow,
    p.refundAttempt ? 1 : 0,
  ]);
  return rows;
}

/**
 * Snoozes a step, fenced like the completion: `scheduled` at now() + $4 ms, one more snooze, and
 * the attempt given back (`max_attempts` + 1: the claim counted one, the snooze must not use it),
 * with no error entry. A wait node parks this way until its deadline without counting a snooze,
 * and is due at once when its signal came meanwhile (`signalled`, set by the signal under this
 * row's lock, so the two never miss each other). The run's counters do not move (`running` and `scheduled` both count as
 * active). Workers are told (NOTIFY), so an idle one re-reads when its next step is due.
 * $1 run_id, $2 node, $3 attempt, $4 delay ms, $5 channel. Returns the step's snooze count, or
 * no row when the fence did not match.
 */
export const snoozeStepSql = (s: string) => `
UPDATE ${s}.cyclone_steps
SET state = 'scheduled', max_attempts = max_attempts + 1,
    snoozes = snoozes + CASE WHEN wait_for IS NULL THEN 1 ELSE 0 END,
    scheduled_at = CASE WHEN wait_for IS NOT NULL AND signalled THEN now()
                        ELSE now() + make_interval(secs => $4::double precision / 1000) END,
    lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
WHERE run_id = $1 AND node = $2 AND attempt = $3 AND state = 'running'
RETURNING snoozes, pg_notify($5, workflow) IS NULL AS notified`;

const snoozeStepStatement = defineStatement('snooze_step', snoozeStepSql);

/**
 * Snoozes a step for `delayMs`, fenced on its attempt.
 * @returns `[{ snoozes }]` when recorded, `[]` when fenced out (the lease was lost).
 */
export async function snoozeStep(
  on: Queryable,
  db: SqlScope,
  p: { runId: string; node: string; attempt: number; delayMs: number },
): Promise<{ snoozes: number }[]> {
  const { rows } = await send<{ snoozes: number }>(on, snoozeStepStatement(db), [
    p.runId,
    p.node,
    p.attempt,
    p.delayMs,
    db.channel,
  ]);
  return rows;
}
