/**
 * Signals and wait nodes: storing a signal (the first one of a name per run stands) and waking
 * the run's wait nodes of that name, and reading what a wait node resolves to.
 */
import type { Json } from '../types.js';
import { defineStatement, type Queryable, type SqlScope, send } from './statement.js';

/**
 * Stores signal $2 with payload $3 for run $1 while the run is `running`, unless the run has a
 * signal of that name already (`accepted` false). An accepted signal marks every wait step of
 * that name in the run `signalled` — under each step's row lock, so a wait node released at the
 * same moment sees the mark whichever transaction commits first — and makes a waiting one due
 * now (NOTIFY on channel $4). `run_state` is NULL when there is no such run.
 */
export const insertSignalSql = (s: string) => `
WITH run AS (
  SELECT id, state, workflow FROM ${s}.cyclone_runs WHERE id = $1
), ins AS (
  INSERT INTO ${s}.cyclone_signals (run_id, name, payload)
  SELECT id, $2, $3::jsonb FROM run WHERE state = 'running'
  ON CONFLICT (run_id, name) DO NOTHING
  RETURNING run_id
), woken AS (
  UPDATE ${s}.cyclone_steps t
  SET signalled = true, updated_at = now(),
      scheduled_at = CASE WHEN t.state = 'scheduled' THEN now() ELSE t.scheduled_at END
  FROM ins WHERE t.run_id = ins.run_id AND t.wait_for = $2 AND t.state IN ('pending', 'scheduled')
  RETURNING t.state
)
SELECT (SELECT state FROM run) AS run_state, EXISTS (SELECT 1 FROM ins) AS accepted,
       CASE WHEN EXISTS (SELECT 1 FROM woken WHERE state = 'scheduled')
            THEN pg_notify($4, (SELECT workflow FROM run)) END IS NULL AS quiet`;

/**
 * What wait step ($1 run_id, $2 node) resolves to: `delivered` when its signal exists and was
 * sent by its deadline (no deadline: whenever it was sent), with the signal's payload.
 */
export const selectWaitOutcomeSql = (s: string) => `
SELECT s.payload,
       (s.run_id IS NOT NULL AND s.created_at <= coalesce(st.wait_deadline, 'infinity')) AS delivered
FROM ${s}.cyclone_steps st
LEFT JOIN ${s}.cyclone_signals s ON s.run_id = st.run_id AND s.name = st.wait_for
WHERE st.run_id = $1 AND st.node = $2`;

const insertSignalStatement = defineStatement('insert_signal', insertSignalSql, false);
const selectWaitOutcomeStatement = defineStatement('select_wait_outcome', selectWaitOutcomeSql);

/** What storing a signal found: the run's state (null: no such run) and whether it stood. */
export interface InsertedSignal {
  run_state: string | null;
  accepted: boolean;
}

/**
 * Stores a signal; see `insertSignalSql`.
 * @param plainText true on a caller's transaction (`Tx.query` takes text only).
 */
export async function insertSignal(
  on: Queryable,
  db: SqlScope,
  p: { runId: string; name: string; payload: string },
  plainText = false,
): Promise<InsertedSignal> {
  const { rows } = await send<InsertedSignal>(
    on,
    insertSignalStatement(db),
    [p.runId, p.name, p.payload, db.channel],
    plainText,
  );
  return rows[0] ?? { run_state: null, accepted: false };
}

/** What a wait step resolves to now: its signal's payload, or that it timed out. */
export async function selectWaitOutcome(
  on: Queryable,
  db: SqlScope,
  p: { runId: string; node: string },
): Promise<{ delivered: boolean; payload: Json | null }> {
  const { rows } = await send<{ delivered: boolean; payload: Json | null }>(
    on,
    selectWaitOutcomeStatement(db),
    [p.runId, p.node],
  );
  return rows[0] ?? { delivered: false, payload: null };
}
