/** What the metrics read of the queue: a capped count of the ready steps and the oldest one's age. */
import { defineStatement, type Queryable, type SqlScope, send } from './statement.js';

/**
 * The ready steps (claimable and due, of every workflow), counted up to $1, and how long the
 * oldest of them has been due (ms, 0 when none is). Both go by the claim index in scheduled_at
 * order (the ORDER BY keeps the planner there: a sequential scan would read every finished row
 * when few are ready): the count reads at most $1 entries, the age one, however long the
 * backlog and the history are.
 */
export const queueStatsSql = (s: string) => `
SELECT (SELECT count(*)::int FROM (
          SELECT 1 FROM ${s}.cyclone_steps
          WHERE state IN ('available', 'retryable', 'scheduled') AND scheduled_at <= now()
          ORDER BY scheduled_at
          LIMIT $1) capped) AS ready,
       coalesce((SELECT (extract(epoch FROM (now() - scheduled_at)) * 1000)::float8
                 FROM ${s}.cyclone_steps
                 WHERE state IN ('available', 'retryable', 'scheduled') AND scheduled_at <= now()
                 ORDER BY scheduled_at
                 LIMIT 1), 0) AS max_age_ms`;

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
