/**
 * The step fence, written once: "this step is still `running` at this attempt". Every write that
 * must not outlive its claim (a completion, a failure, a ledger row letting a provider call
 * through, `ctx.assertLease()`) carries it, because the attempt a claim sets is its fencing
 * token: a worker whose lease was taken over finds its attempt gone and its write refused.
 *
 * The fragments take SQL expressions (a parameter such as `$1`, or a column such as `l.run_id`)
 * and the quoted schema; sibling packages embed them in their own statements through
 * `@cyclone/core/internal`, so no other package names the engine's tables.
 */
import { defineStatement, type Queryable, type SqlScope, send } from './statement.js';

/**
 * A boolean SQL expression: the step `(run, node)` is `running` at attempt `attempt`.
 * @param s the quoted schema.
 * @param run, node, attempt SQL expressions for the step's identity and the claim's attempt.
 */
export const stepHeldSql = (s: string, run: string, node: string, attempt: string) =>
  `EXISTS (SELECT 1 FROM ${s}.cyclone_steps st
           WHERE st.run_id = ${run} AND st.node = ${node} AND st.attempt = ${attempt}
             AND st.state = 'running')`;

/**
 * A boolean SQL expression: some attempt of the step `(run, node)` is `running` now (whoever
 * holds it). Used to change a record only while no attempt of its step can be writing it.
 */
export const stepRunningSql = (s: string, run: string, node: string) =>
  `EXISTS (SELECT 1 FROM ${s}.cyclone_steps st
                  WHERE st.run_id = ${run} AND st.node = ${node} AND st.state = 'running')`;

/**
 * A boolean SQL expression: an operator reopened the step `(run, node)` (`Client.retry`,
 * `retryAll`) when it had reached an attempt in `[from, before)`: attempts after that come
 * from the operator's retry.
 */
export const stepReopenedBetweenSql = (
  s: string,
  run: string,
  node: string,
  from: string,
  before: string,
) => `EXISTS (
         SELECT 1 FROM ${s}.cyclone_steps st
         WHERE st.run_id = ${run} AND st.node = ${node}
           AND st.reopened_after_attempt >= ${from} AND st.reopened_after_attempt < ${before}
       )`;

/**
 * A join clause to a record's run: `JOIN <runs> <alias> ON <alias>.id = <runId>`, whose columns
 * `state` and `completed_at` a retention statement filters on.
 */
export const joinRunSql = (s: string, alias: string, runId: string) =>
  `JOIN ${s}.cyclone_runs ${alias} ON ${alias}.id = ${runId}`;

/** The step fence as one statement: `held` is true while `($1 run_id, $2 node, $3 attempt)` is running. */
export const selectStepHeld = (s: string) => `SELECT ${stepHeldSql(s, '$1', '$2', '$3')} AS held`;

/** `ctx.assertLease()`'s check: a row while `($1 run_id, $2 node, $3 attempt)` is running. */
export const selectStepRunningSql = (s: string) =>
  `SELECT 1 FROM ${s}.cyclone_steps
         WHERE run_id = $1 AND node = $2 AND attempt = $3 AND state = 'running'`;

/**
 * After a completion whose outcome is unknown (the connection died around COMMIT): a row when
 * the step is completed at `($1 run_id, $2 node, $3 attempt)`, so that attempt's commit went in.
 */
export const selectStepCompletedSql = (s: string) =>
  `SELECT 1 FROM ${s}.cyclone_steps
         WHERE run_id = $1 AND node = $2 AND attempt = $3 AND state = 'completed'`;

const stepRunningStatement = defineStatement('step_running', selectStepRunningSql, false);
const stepCompletedStatement = defineStatement('step_completed', selectStepCompletedSql, false);

/** True while the step is `running` at `attempt` (the lease is held). */
export async function isStepHeld(
  on: Queryable,
  db: SqlScope,
  p: { runId: string; node: string; attempt: number },
): Promise<boolean> {
  const { rows } = await send(on, stepRunningStatement(db), [p.runId, p.node, p.attempt], true);
  return rows.length > 0;
}

/** True when the step was completed by `attempt`. */
export async function isStepCompletedBy(
  on: Queryable,
  db: SqlScope,
  p: { runId: string; node: string; attempt: number },
): Promise<boolean> {
  const { rows } = await send(on, stepCompletedStatement(db), [p.runId, p.node, p.attempt], true);
  return rows.length === 1;
}
