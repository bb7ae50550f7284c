/**
 * Inspection, operator actions and retention: the statements on whole runs. None is on the hot
 * path, so they go as plain text. Every one but retention touches the rows of one run.
 */
import { defineStatement, type Queryable, type SqlScope, send } from './statement.js';

// biome-ignore lint/suspicious/noExplicitAny: rows from pg are untyped; inspect.ts maps them
type Row = any;

/** A run's row. $1 run id. */
export const selectRunSql = (s: string) => `SELECT * FROM ${s}.cyclone_runs WHERE id = $1`;

/** A run's steps, in topological order, then by name. $1 run id. */
export const selectStepsSql = (s: string) =>
  `SELECT * FROM ${s}.cyclone_steps WHERE run_id = $1
       ORDER BY cardinality(ancestors), node`;

/** Runs, newest first. $1 state or NULL, $2 workflow or NULL, $3 limit. */
export const listRunsSql = (s: string) =>
  `SELECT id, workflow, state, submit_key, steps_remaining, created_at, updated_at, completed_at
       FROM ${s}.cyclone_runs
       WHERE ($1::text IS NULL OR state = $1) AND ($2::text IS NULL OR workflow = $2)
       ORDER BY created_at DESC, id LIMIT $3`;

/**
 * How many runs `listRuns` would find without its limit, counted only up to $3 rows (a count of
 * a large table is a full scan; the CLI says "more than" past the cap). $1 state or NULL, $2
 * workflow or NULL, as `listRunsSql`.
 */
export const countRunsSql = (s: string) =>
  `SELECT count(*)::int AS n FROM (
         SELECT 1 FROM ${s}.cyclone_runs
         WHERE ($1::text IS NULL OR state = $1) AND ($2::text IS NULL OR workflow = $2)
         LIMIT $3) capped`;

/**
 * An operator action's locks, taken without waiting (in a transaction): every step row of run $1
 * and the run row, `FOR UPDATE SKIP LOCKED`. One row: the run's `state`, `steps_active` and
 * `workflow` (NULL when its row was not locked: `run_exists` says whether it is there, held by
 * another transaction), the locked steps' `nodes` and `states`, and `busy_node`, a step whose row
 * another transaction holds (NULL when every step was locked). A held row is skipped, never waited
 * for, so this statement cannot be part of a deadlock whatever order others lock rows in; the
 * caller waits for a held row on its own (`waitForStepSql`, `waitForRunSql`) and tries again.
 */
export const lockRunNowSql = (s: string) => `
WITH steps AS MATERIALIZED (
  SELECT node, state FROM ${s}.cyclone_steps WHERE run_id = $1 FOR UPDATE SKIP LOCKED
), run AS MATERIALIZED (
  SELECT state, steps_active, workflow FROM ${s}.cyclone_runs WHERE id = $1 FOR UPDATE SKIP LOCKED
)
SELECT run.state, run.steps_active, run.workflow,
       EXISTS (SELECT 1 FROM ${s}.cyclone_runs WHERE id = $1) AS run_exists,
       ARRAY(SELECT node FROM steps ORDER BY node) AS nodes,
       ARRAY(SELECT state FROM steps ORDER BY node) AS states,
       (SELECT t.node FROM ${s}.cyclone_steps t
        WHERE t.run_id = $1 AND NOT EXISTS (SELECT 1 FROM steps l WHERE l.node = t.node)
        ORDER BY cardinality(t.ancestors), t.node LIMIT 1) AS busy_node
FROM (SELECT) AS one LEFT JOIN run ON true`;

/**
 * Waits for and locks step ($1 run id, $2 node) that `lockRunNowSql` found held, as the first
 * lock of a transaction: waiting while holding nothing else, it cannot close a cycle.
 */
export const waitForStepSql = (s: string) =>
  `SELECT 1 FROM ${s}.cyclone_steps WHERE run_id = $1 AND node = $2 FOR UPDATE`;

/** Waits for and locks run $1's row that `lockRunNowSql` found held; as `waitForStepSql`. */
export const waitForRunSql = (s: string) =>
  `SELECT 1 FROM ${s}.cyclone_runs WHERE id = $1 FOR UPDATE`;

/**
 * The fallback of an operator action that kept finding rows held: every step row of run $1,
 * waiting, in topological order (an upstream before its downstream nodes, as a completion locks
 * the step it completes before the downstream rows it releases), then node order by bytes (the
 * order a completion batch locks its steps in, completion-batcher.ts), so a busy run's many
 * steps in flight do not deadlock with it. `lockRunWaitingSql` follows. A deadlock is still
 * possible here (a batch holding steps of one run at different depths; retention and debounce
 * lock a run row before its steps), and the operator's transaction is then run again.
 */
export const lockStepsWaitingSql = (s: string) =>
  `SELECT node, state FROM ${s}.cyclone_steps WHERE run_id = $1
       ORDER BY cardinality(ancestors), node COLLATE "C" FOR UPDATE`;

/**
 * Locks run $1's row, waiting, after `lockStepsWaitingSql`. `NO KEY`: a signal holds the row `FOR
 * KEY SHARE` while it waits for its wait steps, which this transaction holds already.
 */
export const lockRunWaitingSql = (s: string) =>
  `SELECT state, steps_active, workflow FROM ${s}.cyclone_runs WHERE id = $1 FOR NO KEY UPDATE`;

/**
 * Operator retry: reopens the run's discarded or cancelled steps (only node $2 unless NULL) in
 * place; exhausted attempts get the same budget again. $1 run id, $2 node or NULL.
 */
export const reopenStepsSql = (s: string) =>
  `UPDATE ${s}.cyclone_steps t
         SET state = CASE WHEN t.deps_remaining = 0 THEN 'available' ELSE 'pending' END,
             max_attempts = CASE WHEN t.attempt >= t.max_attempts
                                 THEN t.attempt + t.max_attempts ELSE t.max_attempts END,
             reopened_after_attempt = t.attempt, scheduled_at = now(), updated_at = now()
         WHERE t.run_id = $1 AND ($2::text IS NULL OR t.node = $2)
           AND t.state IN ('discarded', 'cancelled')
         RETURNING t.node, t.state`;

/** Puts a run back to `running` with $2 more active steps. $1 run id. */
export const reactivateRunSql = (s: string) =>
  `UPDATE ${s}.cyclone_runs SET state = 'running', completed_at = NULL,
           steps_active = steps_active + $2, updated_at = now() WHERE id = $1`;

/** Cancels every unfinished step of a run. $1 run id. */
export const cancelStepsSql = (s: string) =>
  `UPDATE ${s}.cyclone_steps SET state = 'cancelled', lease_owner = NULL,
           lease_expires_at = NULL, updated_at = now()
         WHERE run_id = $1
           AND state IN ('pending', 'available', 'scheduled', 'running', 'retryable')`;

/** Marks a run cancelled. $1 run id. */
export const cancelRunSql = (s: string) =>
  `UPDATE ${s}.cyclone_runs SET state = 'cancelled', steps_active = 0,
           completed_at = now(), updated_at = now() WHERE id = $1`;

/** Wakes the workers of workflow $2 on channel $1. */
export const notifySql = (_s: string) => 'SELECT pg_notify($1, $2)';

/**
 * Retention (`Client.deleteFinishedRuns`): deletes one batch of at most $4 finished runs in the
 * states $1 that finished more than $2 ms ago, oldest first, only of workflow $3 when it is not
 * NULL. The victims are locked in a MATERIALIZED CTE first (`FOR UPDATE SKIP LOCKED`: a run an
 * operator is retrying right now is skipped), then the DELETE joins to them, so LIMIT really
 * limits, and re-checks the state on the rows it locked, so a run
 * that went back to `running` is never deleted. The literal state list matches the partial index
 * `cyclone_runs_finished` (migration 000004), which a generic plan of `state = ANY($1)` alone
 * could not use. Steps and @cyclone/idempotency's ledger rows go with their run (`ON DELETE
 * CASCADE`). Returns `deleted`, the number of runs deleted.
 */
export const deleteFinishedRunsSql = (s: string) => `
WITH victims AS MATERIALIZED (
  SELECT id FROM ${s}.cyclone_runs
  WHERE state IN ('completed', 'failed', 'cancelled') AND state = ANY($1::text[])
    AND completed_at < now() - make_interval(secs => $2::double precision / 1000)
    AND ($3::text IS NULL OR workflow = $3::text)
  ORDER BY completed_at
  LIMIT $4
  FOR UPDATE SKIP LOCKED
), gone AS (
  DELETE FROM ${s}.cyclone_runs r USING victims v
  WHERE r.id = v.id AND r.state IN ('completed', 'failed', 'cancelled') AND r.state = ANY($1::text[])
  RETURNING 1
)
SELECT count(*)::int AS deleted FROM gone`;

const selectRunStatement = defineStatement('select_run', selectRunSql, false);
const selectStepsStatement = defineStatement('select_steps', selectStepsSql, false);
const listRunsStatement = defineStatement('list_runs', listRunsSql, false);
const countRunsStatement = defineStatement('count_runs', countRunsSql, false);
const lockRunNowStatement = defineStatement('lock_run_now', lockRunNowSql, false);
const waitForStepStatement = defineStatement('wait_for_step', waitForStepSql, false);
const waitForRunStatement = defineStatement('wait_for_run', waitForRunSql, false);
const lockStepsWaitingStatement = defineStatement('lock_steps_waiting', lockStepsWaitingSql, false);
const lockRunWaitingStatement = defineStatement('lock_run_waiting', lockRunWaitingSql, false);
const reopenStepsStatement = defineStatement('reopen_steps', reopenStepsSql, false);
const reactivateRunStatement = defineStatement('reactivate_run', reactivateRunSql, false);
const cancelStepsStatement = defineStatement('cancel_steps', cancelStepsSql, false);
const cancelRunStatement = defineStatement('cancel_run', cancelRunSql, false);
const notifyStatement = defineStatement('notify', notifySql, false);
const deleteFinishedRunsStatement = defineStatement(
  'delete_finished_runs',
  deleteFinishedRunsSql,
  false,
);

/** A run's row (all columns), or undefined. */
export async function selectRun(on: Queryable, db: SqlScope, runId: string): Promise<Row> {
  return (await send(on, selectRunStatement(db), [runId])).rows[0];
}

/** A run's step rows (all columns), in topological order, then by name. */
export async function selectSteps(on: Queryable, db: SqlScope, runId: string): Promise<Row[]> {
  return (await send(on, selectStepsStatement(db), [runId])).rows;
}

/** Run rows without input, newest first. */
export async function listRuns(
  on: Queryable,
  db: SqlScope,
  p: { state: string | null; workflow: string | null; limit: number },
): Promise<Row[]> {
  return (await send(on, listRunsStatement(db), [p.state, p.workflow, p.limit])).rows;
}

/** Runs matching the filters, counted up to `cap`. */
export async function countRuns(
  on: Queryable,
  db: SqlScope,
  p: { state: string | null; workflow: string | null; cap: number },
): Promise<number> {
  const { rows } = await send<{ n: number }>(on, countRunsStatement(db), [
    p.state,
    p.workflow,
    p.cap,
  ]);
  return rows[0]?.n ?? 0;
}

/** What an operator action needs of the run it locked, and of its steps. */
export interface LockedRun {
  state: string;
  steps_active: number;
  workflow: string;
  /** Every step of the run (all locked): node → state. */
  steps: Map<string, string>;
}

/**
 * What `lockRunNow` got: the run with all its steps locked, or the row it found held by another
 * transaction (a step's node, or the run's row), or that there is no such run.
 */
export type LockAttempt =
  | { locked: LockedRun }
  | { busy: { node: string } | { run: true } }
  | { missing: true };

/** Tries to lock a run's row and all its step rows without waiting; see `lockRunNowSql`. */
export async function lockRunNow(on: Queryable, db: SqlScope, runId: string): Promise<LockAttempt> {
  const { rows } = await send<{
    state: string | null;
    steps_active: number | null;
    workflow: string | null;
    run_exists: boolean;
    nodes: string[];
    states: string[];
    busy_node: string | null;
  }>(on, lockRunNowStatement(db), [runId]);
  const r = rows[0];
  if (!r?.run_exists) return { missing: true };
  if (r.busy_node !== null) return { busy: { node: r.busy_node } };
  if (r.state === null || r.steps_active === null || r.workflow === null) {
    return { busy: { run: true } };
  }
  const steps = new Map(r.nodes.map((node, i) => [node, r.states[i] as string]));
  return { locked: { state: r.state, steps_active: r.steps_active, workflow: r.workflow, steps } };
}

/** Waits for a row `lockRunNow` found held, and locks it. The transaction's first lock. */
export async function waitForRow(
  on: Queryable,
  db: SqlScope,
  runId: string,
  busy: { node: string } | { run: true },
): Promise<void> {
  if ('node' in busy) await send(on, waitForStepStatement(db), [runId, busy.node]);
  else await send(on, waitForRunStatement(db), [runId]);
}

/**
 * Locks a run's step rows, then its row, waiting for each (`lockStepsWaitingSql`); undefined when
 * there is no such run.
 */
export async function lockRunWaiting(
  on: Queryable,
  db: SqlScope,
  runId: string,
): Promise<LockedRun | undefined> {
  const steps = await send<{ node: string; state: string }>(on, lockStepsWaitingStatement(db), [
    runId,
  ]);
  const run = (await send<Omit<LockedRun, 'steps'>>(on, lockRunWaitingStatement(db), [runId]))
    .rows[0];
  if (!run) return undefined;
  return { ...run, steps: new Map(steps.rows.map((r) => [r.node, r.state])) };
}

/** Reopens discarded or cancelled steps (one node, or all when `node` is null). */
export async function reopenSteps(
  on: Queryable,
  db: SqlScope,
  p: { runId: string; node: string | null },
): Promise<{ node: string; state: string }[]> {
  return (
    await send<{ node: string; state: string }>(on, reopenStepsStatement(db), [p.runId, p.node])
  ).rows;
}

/** Puts a run back to `running` with `activated` more active steps. */
export async function reactivateRun(
  on: Queryable,
  db: SqlScope,
  p: { runId: string; activated: number },
): Promise<void> {
  await send(on, reactivateRunStatement(db), [p.runId, p.activated]);
}

/**
 * Cancels every unfinished step of a run, then the run. Inside the run's transaction.
 * @returns how many steps were cancelled.
 */
export async function cancelRun(on: Queryable, db: SqlScope, runId: string): Promise<number> {
  const steps = await send(on, cancelStepsStatement(db), [runId]);
  await send(on, cancelRunStatement(db), [runId]);
  return steps.rowCount ?? 0;
}

/** Wakes the workers of `workflow` (NOTIFY on the schema's channel). */
export async function notifyWorkflow(on: Queryable, db: SqlScope, workflow: string): Promise<void> {
  await send(on, notifyStatement(db), [db.channel, workflow]);
}

/** Deletes one batch of finished runs. @returns how many were deleted. */
export async function deleteFinishedRuns(
  on: Queryable,
  db: SqlScope,
  p: { states: string[]; olderThanMs: number; workflow: string | null; limit: number },
): Promise<number> {
  const { rows } = await send<{ deleted: number }>(on, deleteFinishedRunsStatement(db), [
    p.states,
    p.olderThanMs,
    p.workflow,
    p.limit,
  ]);
  return rows[0]?.deleted ?? 0;
}
