/** The heartbeat: extends the leases of a worker's steps in one statement. */
import { defineStatement, type Queryable, type SqlScope, send } from './statement.js';

/**
 * Extends the leases of a worker's in-flight steps in one statement (every lease/3), including
 * steps whose handler returned and whose outcome waits to be recorded; or of several workers'
 * steps (workers on one caller-given pool), each step with its own owner. Only rows still
 * `running` at the same attempt and owned by that step's owner ($4[i]) are extended. Rows locked
 * right now are skipped, not waited for (`SKIP LOCKED`): a completion batch blocked on one run's
 * row lock must not hold up the heartbeat of every other step. A skipped row still `running` under our attempt (as of this
 * statement) counts as held: whoever holds its lock (our own completion, or a sweep that
 * will tell the next heartbeat) decides it. The rows returned are the leases still held; the
 * others were lost. $1 run_ids, $2 nodes, $3 attempts, $4 owners (text[], one per step), $5
 * lease ms.
 */
export const extendLeasesSql = (s: string) => `
WITH mine AS MATERIALIZED (
  SELECT t.run_id, t.node, t.attempt, h.owner
  FROM unnest($1::uuid[], $2::text[], $3::int[], $4::text[]) AS h(run_id, node, attempt, owner)
  CROSS JOIN LATERAL (
    -- One primary-key lookup per step, whatever the statistics say (LIMIT 1 keeps the planner
    -- from flattening this into a join it might run as a scan of the table).
    SELECT t.run_id, t.node, t.attempt FROM ${s}.cyclone_steps t
    WHERE t.run_id = h.run_id AND t.node = h.node AND t.attempt = h.attempt
      AND t.state = 'running' AND t.lease_owner = h.owner
    LIMIT 1
  ) t
), locked AS MATERIALIZED (
  SELECT l.run_id, l.node, l.attempt FROM mine m
  CROSS JOIN LATERAL (
    SELECT t.run_id, t.node, t.attempt FROM ${s}.cyclone_steps t
    WHERE t.run_id = m.run_id AND t.node = m.node AND t.attempt = m.attempt
      AND t.state = 'running' AND t.lease_owner = m.owner
    LIMIT 1
    FOR UPDATE SKIP LOCKED
  ) l
), extended AS (
  UPDATE ${s}.cyclone_steps t
  SET lease_expires_at = now() + make_interval(secs => $5::double precision / 1000)
  FROM locked l WHERE t.run_id = l.run_id AND t.node = l.node
  RETURNING t.run_id, t.node, t.attempt
)
SELECT run_id, node, attempt FROM extended
UNION ALL
-- Held but locked right now; EXCEPT hashes, so this stays linear in the number of steps.
(SELECT run_id, node, attempt FROM mine EXCEPT SELECT run_id, node, attempt FROM locked)`;

/** A step by its identity and the attempt (fencing token) its worker holds. */
export interface StepAttempt {
  run_id: string;
  node: string;
  attempt: number;
}

const extendLeasesStatement = defineStatement('extend_leases', extendLeasesSql);

/**
 * Extends the leases of `steps` to `leaseMs` from now, each held by `owners[i]` (one owner per
 * step, in the same order).
 * @returns the steps whose lease is still held; the others were lost.
 */
export async function extendLeases(
  on: Queryable,
  db: SqlScope,
  p: {
    steps: readonly { runId: string; node: string; attempt: number }[];
    owners: readonly string[];
    leaseMs: number;
  },
): Promise<StepAttempt[]> {
  const { rows } = await send<StepAttempt>(on, extendLeasesStatement(db), [
    p.steps.map((h) => h.runId),
    p.steps.map((h) => h.node),
    p.steps.map((h) => h.attempt),
    p.owners,
    p.leaseMs,
  ]);
  return rows;
}
