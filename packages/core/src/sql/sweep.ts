/** The recovery sweep: reclaims steps whose lease expired. */
import { defineStatement, type Queryable, type SqlScope, send } from './statement.js';

/**
 * The recovery sweep: one statement that locks up to $1 `running` steps whose lease expired
 * (`FOR UPDATE SKIP LOCKED`, so a step being completed, failed or re-claimed right now is
 * skipped) and re-checks `state = 'running' AND lease_expires_at < now()` on the rows it
 * locked, so a step that finished between the read and the lock is never
 * overwritten. Each becomes `retryable` (now)
 * or `discarded` when its attempts are exhausted, with a `lease_expired` error entry.
 * Returns the swept steps; $2 channel.
 */
export const sweepExpiredLeasesSql = (s: string) => `
WITH x AS MATERIALIZED (
  SELECT run_id, node FROM ${s}.cyclone_steps
  WHERE state = 'running' AND lease_expires_at < now()
  ORDER BY lease_expires_at
  LIMIT $1
  FOR UPDATE SKIP LOCKED
), swept AS (
  UPDATE ${s}.cyclone_steps t
  SET state = CASE WHEN t.attempt >= t.max_attempts THEN 'discarded' ELSE 'retryable' END,
      scheduled_at = now(), lease_owner = NULL, lease_expires_at = NULL, updated_at = now(),
      errors = t.errors || jsonb_build_array(jsonb_build_object(
        'attempt', t.attempt, 'at', now(), 'kind', 'lease_expired',
        'message', 'lease expired (held by worker ' || coalesce(t.lease_owner, '?')
          || '): the worker died, stalled past its lease or lost its database connection'))
  FROM x WHERE t.run_id = x.run_id AND t.node = x.node
    -- The re-check on the locked row. Written with coalesce so that it does not imply the lease
    -- index's predicate: the planner then joins x to the rows by the primary key instead of
    -- reading every expired lease for each row of x (quadratic with stale statistics).
    AND t.state = 'running' AND coalesce(t.lease_expires_at, 'infinity') < now()
  RETURNING t.run_id, t.node, t.workflow, t.state, t.attempt
), d AS (
  SELECT run_id, count(*)::int AS n FROM swept WHERE state = 'discarded' GROUP BY run_id
), locked AS MATERIALIZED (
  -- The run rows locked in id order, as the completion statement takes them: two sweeps, or a
  -- sweep and a completion, that both touch runs A and B never wait for each other in a cycle.
  -- NO KEY: what the UPDATE below takes anyway, and no wait on a signal's KEY SHARE.
  SELECT r.id FROM ${s}.cyclone_runs r JOIN d ON r.id = d.run_id ORDER BY r.id
  FOR NO KEY UPDATE OF r
), runs AS (
  UPDATE ${s}.cyclone_runs r
  SET steps_active = r.steps_active - d.n,
      state = CASE WHEN r.state = 'running' AND r.steps_active = d.n THEN 'failed' ELSE r.state END,
      completed_at = CASE WHEN r.state = 'running' AND r.steps_active = d.n THEN now() ELSE r.completed_at END,
      updated_at = now()
  FROM d, locked l WHERE r.id = d.run_id AND l.id = r.id
  RETURNING r.id
)
SELECT swept.run_id, swept.node, swept.workflow, swept.state, swept.attempt,
       CASE WHEN swept.state = 'retryable' THEN pg_notify($2, swept.workflow) END AS notified
FROM swept`;

/** A step moved by the sweep, and the state it was moved to. */
export interface SweptStep {
  run_id: string;
  node: string;
  workflow: string;
  state: 'retryable' | 'discarded';
  attempt: number;
}

const sweepStatement = defineStatement('sweep_expired_leases', sweepExpiredLeasesSql);

/** Moves up to `limit` steps whose lease expired to `retryable` (or `discarded`). */
export async function sweepExpiredLeases(
  on: Queryable,
  db: SqlScope,
  p: { limit: number },
): Promise<SweptStep[]> {
  const { rows } = await send<SweptStep>(on, sweepStatement(db), [p.limit, db.channel]);
  return rows;
}
