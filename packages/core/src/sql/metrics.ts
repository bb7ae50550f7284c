/** What the metrics read of the queue: a capped count of the ready steps and the oldest one's age. */
import { PRIORITIES } from './claim.js';
import { defineStatement, type Queryable, type SqlScope, send } from './statement.js';

/**
 * The ready steps (claimable and due, of every workflow), counted up to $1, and how long the
 * oldest of them has been due (ms, 0 when none is). Steps of actions without limits go by the
 * claim index, each priority present (the claim's loose scan) read from its due end; steps whose
 * limit keys are to be resolved by their own index in scheduled_at order. Steps held back by a
 * limit are not counted here (`listLimits` shows them). Each read stops after $1 entries (the
 * count) or one (the age), however long the backlog and the history are.
 */
export const queueStatsSql = (s: string) => `
WITH RECURSIVE ${PRIORITIES(s)}, due AS (
  SELECT x.scheduled_at FROM p CROSS JOIN LATERAL (
    SELECT scheduled_at FROM ${s}.cyclone_steps
    WHERE state IN ('available', 'retryable', 'scheduled') AND flow = 0
      AND priority = p.priority AND scheduled_at <= now()
    ORDER BY scheduled_at LIMIT $1) x
  UNION ALL
  (SELECT scheduled_at FROM ${s}.cyclone_steps
   WHERE state IN ('available', 'retryable', 'scheduled') AND flow = 1 AND scheduled_at <= now()
   ORDER BY scheduled_at LIMIT $1)
)
SELECT least($1::int, (SELECT count(*) FROM due))::int AS ready,
       coalesce((SELECT (extract(epoch FROM (now() - min(scheduled_at))) * 1000)::float8
                 FROM due), 0) AS max_age_ms`;

/** The queue as the metrics see it. */
export interface QueueStats {
  /** Ready steps, at most the cap asked for. */
  ready: number;
  /** How long the oldest ready step has been due, ms (0 when none is). */
  maxAgeMs: number;
}

const queueStatsStatement = defineStatement('queue_stats', queueStatsSql, false);

/** The ready steps, counted up to `cap`, and the oldest one's age. */
export async function queueStats(on: Queryable, db: SqlScope, cap: number): Promise<QueueStats> {
  const { rows } = await send<{ ready: number; max_age_ms: number }>(on, queueStatsStatement(db), [
    cap,
  ]);
  const r = rows[0];
  return { ready: r?.ready ?? 0, maxAgeMs: Math.max(0, r?.max_age_ms ?? 0) };
}
