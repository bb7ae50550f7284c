/**
 * Signals and wait nodes: storing a signal (the first one of a name per run stands) and waking
 * the run's wait nodes of that name, and reading what a wait node resolves to.
 */
import type { Json } from '../types.js';
import { defineStatement, type Queryable, type SqlScope, send } from './statement.js';

/**
 * The first statement of a signal's transaction: run $1's state (no row: no such run), its row
 * locked `FOR KEY SHARE`. That waits for an operator's action on the run (cancel and retry hold
 * it `FOR UPDATE`; they never wait for a row while holding one, so no cycle follows), and it does
 * not wait for completions (they update run rows without changing a key).
 */
export const lockRunForSignalSql = (s: string) =>
  `SELECT state FROM ${s}.cyclone_runs WHERE id = $1 FOR KEY SHARE`;

/**
 * Then locks run $1's wait steps for signal $2, and reads their states (which of them still
 * wait). A wait step resolving takes the same lock first, so a signal and a resolution are
 * ordered by it: the one that locks second sees what the first committed, and a signal stored
 * after a timeout was decided bears a later time than the decision.
 */
export const lockWaitStepsSql = (s: string) =>
  `SELECT node, state FROM ${s}.cyclone_steps WHERE run_id = $1 AND wait_for = $2 ORDER BY node FOR UPDATE`;

/**
 * Stores signal $2 with payload $3 for run $1 while the run is `running`, unless the run has a
 * signal of that name already (`accepted` false). An accepted signal marks every unfinished wait
 * step of that name in the run `signalled` — under each step's row lock, so a wait node parking
 * at the same moment sees the mark whichever transaction commits first — and makes a parked one
 * due now (NOTIFY on channel $4). Parked means claimed before (`started_at`): a wait node that is
 * `scheduled` because its delayed run has not started keeps its time, and takes the signal when
 * it is reached. `run_state` is NULL when there is no such run.
 */
export const insertSignalSql = (s: string) => `
WITH run AS (
  SELECT id, state, workflow FROM ${s}.cyclone_runs WHERE id = $1
), ins AS (
  -- The time it is stored, not the transaction's start: after lockWaitStepsSql's lock.
  INSERT INTO ${s}.cyclone_signals (run_id, name, payload, created_at)
  SELECT id, $2, $3::jsonb, clock_timestamp() FROM run WHERE state = 'running'
  ON CONFLICT (run_id, name) DO NOTHING
  RETURNING run_id
), woken AS (
  UPDATE ${s}.cyclone_steps t
  SET signalled = true, updated_at = now(),
      scheduled_at = CASE WHEN t.state = 'scheduled' AND t.started_at IS NOT NULL THEN now()
                          ELSE t.scheduled_at END
  FROM ins WHERE t.run_id = ins.run_id AND t.wait_for = $2
    AND t.state IN ('pending', 'available', 'scheduled', 'running', 'retryable')
  RETURNING t.state, t.scheduled_at = now() AS woke
)
SELECT (SELECT state FROM run) AS run_state, EXISTS (SELECT 1 FROM ins) AS accepted,
       CASE WHEN EXISTS (SELECT 1 FROM woken WHERE woke)
            THEN pg_notify($4, (SELECT workflow FROM run)) END IS NULL AS quiet`;

/** Locks wait step ($1 run_id, $2 node) while it resolves; see `lockWaitStepsSql`. */
export const lockWaitStepSql = (s: string) =>
  `SELECT 1 FROM ${s}.cyclone_steps WHERE run_id = $1 AND node = $2 FOR UPDATE`;

/**
 * What wait step ($1 run_id, $2 node) resolves to: `delivered` when its signal exists and was
 * sent by its deadline (no deadline: whenever it was sent), with the signal's payload; else the
 * ms left to its deadline by the database's clock (NULL: no deadline; ≤ 0: timed out). Read
 * after `lockWaitStepSql`, in the same transaction, so it sees every signal committed before.
 */
export const selectWaitOutcomeSql = (s: string) => `
SELECT s.payload,
       (s.run_id IS NOT NULL AND s.created_at <= coalesce(st.wait_deadline, 'infinity')) AS delivered,
       (extract(epoch FROM (st.wait_deadline - clock_timestamp())) * 1000)::float8 AS due_in_ms
FROM ${s}.cyclone_steps st
LEFT JOIN ${s}.cyclone_signals s ON s.run_id = st.run_id AND s.name = st.wait_for
WHERE st.run_id = $1 AND st.node = $2`;

const lockRunForSignalStatement = defineStatement(
  'lock_run_for_signal',
  lockRunForSignalSql,
  false,
);
const lockWaitStepsStatement = defineStatement('lock_wait_steps', lockWaitStepsSql, false);
const insertSignalStatement = defineStatement('insert_signal', insertSignalSql, false);
const lockWaitStepStatement = defineStatement('lock_wait_step', lockWaitStepSql, false);
const selectWaitOutcomeStatement = defineStatement(
  'select_wait_outcome',
  selectWaitOutcomeSql,
  false,
);

/** What storing a signal found: the run's state (null: no such run) and whether it stood. */
export interface InsertedSignal {
  run_state: string | null;
  accepted: boolean;
  /** The run's unfinished wait nodes of the signal's name, read under their row locks. */
  waiting: string[];
}

/** Step states of a wait node that still waits, or will: the ones a signal marks. */
const UNFINISHED = new Set(['pending', 'available', 'scheduled', 'running', 'retryable']);

/**
 * Stores a signal; see `lockRunForSignalSql`, `lockWaitStepsSql` and `insertSignalSql`, in that
 * order: `on` must be inside a transaction (the caller's, or one on a pool connection).
 */
export async function insertSignal(
  on: Queryable,
  db: SqlScope,
  p: { runId: string; name: string; payload: string },
): Promise<InsertedSignal> {
  const run = await send<{ state: string }>(on, lockRunForSignalStatement(db), [p.runId], true);
  if (!run.rows[0]) return { run_state: null, accepted: false, waiting: [] };
  const steps = await send<{ node: string; state: string }>(
    on,
    lockWaitStepsStatement(db),
    [p.runId, p.name],
    true,
  );
  const waiting = steps.rows.filter((r) => UNFINISHED.has(r.state)).map((r) => r.node);
  const { rows } = await send<Omit<InsertedSignal, 'waiting'>>(
    on,
    insertSignalStatement(db),
    [p.runId, p.name, p.payload, db.channel],
    true,
  );
  const r = rows[0] ?? { run_state: null, accepted: false };
  return { run_state: r.run_state, accepted: r.accepted, waiting };
}

/** What a wait step resolves to now; see `selectWaitOutcomeSql`. */
export interface WaitOutcome {
  delivered: boolean;
  payload: Json | null;
  due_in_ms: number | null;
}

/**
 * Locks a wait step and reads what it resolves to now; `on` must be the transaction that will
 * also complete the step (the handler's `completionTx`), so the lock holds until the outcome is
 * committed.
 */
export async function resolveWait(
  on: Queryable,
  db: SqlScope,
  p: { runId: string; node: string },
): Promise<WaitOutcome> {
  await send(on, lockWaitStepStatement(db), [p.runId, p.node], true);
  const { rows } = await send<WaitOutcome>(
    on,
    selectWaitOutcomeStatement(db),
    [p.runId, p.node],
    true,
  );
  return rows[0] ?? { delivered: false, payload: null, due_in_ms: null };
}
