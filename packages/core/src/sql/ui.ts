/**
 * The operator UI's reads (`ui-reader.ts` runs them in read-only transactions with a statement
 * timeout). The rules they keep, so that none of them grows with the finished history:
 * - no unbounded count: counts stop at a cap (`SELECT count(*) FROM (… LIMIT cap)`);
 * - runs are paged by keyset on (created_at, id) along an index (migration 11), never by OFFSET;
 * - the WHERE clause holds only the filters given, and a state filter is a literal from a fixed
 *   list, so the planner sees which index fits (a generic plan for `($1 IS NULL OR …)` or
 *   `state = $1` may not); every other value is a bind parameter;
 * - step queues and leases are read through the claim index and the lease index, which hold only
 *   the live rows;
 * - bodies are read one run or one step at a time, and summaries carry sizes, not bodies.
 * Payloads come back as JSON text (`::text`), so that numbers beyond 2^53 survive to the page.
 */
import { defineStatement, type Queryable, type SqlScope, send } from './statement.js';

// biome-ignore lint/suspicious/noExplicitAny: rows from pg are untyped; ui-reader.ts maps them
type Row = any;

/** The run states a filter may name, the only text put into the runs list's SQL. */
export const RUN_STATES = ['running', 'completed', 'failed', 'cancelled'] as const;
/** A run state a filter names. */
export type RunStateFilter = (typeof RUN_STATES)[number];

/** The columns of a run in a list. */
const RUN_COLUMNS = `id, workflow, state, submit_key, steps_remaining, created_at, completed_at,
       to_json(created_at) #>> '{}' AS created_key`;

/** A state filter per run state: the literal the planner needs to see (the module's rules). */
const STATE_CLAUSE: Record<RunStateFilter, string> = {
  running: "state = 'running'",
  completed: "state = 'completed'",
  failed: "state = 'failed'",
  cancelled: "state = 'cancelled'",
};

/**
 * The claimable steps the overview and health pages count, as a CTE `claimable` (state,
 * scheduled_at, workflow, action, flow): the earliest $1 of each flow (migration 10 keeps one
 * partial index per flow: unlimited, keys to resolve, limited), each read through its own index
 * (the `flow = n` literal lets the planner see which), so the read is bounded by the backlog and
 * by $1, never by the history. A flow with $1 rows in it may have more (`claimable_full`).
 */
const claimableCte = (s: string) => `claimable AS MATERIALIZED (
  (SELECT state, scheduled_at, workflow, action, flow FROM ${s}.cyclone_steps
   WHERE state IN ('available', 'retryable', 'scheduled') AND flow = 0
   ORDER BY scheduled_at LIMIT $1)
  UNION ALL
  (SELECT state, scheduled_at, workflow, action, flow FROM ${s}.cyclone_steps
   WHERE state IN ('available', 'retryable', 'scheduled') AND flow = 1
   ORDER BY scheduled_at LIMIT $1)
  UNION ALL
  (SELECT state, scheduled_at, workflow, action, flow FROM ${s}.cyclone_steps
   WHERE state IN ('available', 'retryable', 'scheduled') AND flow = 2
   ORDER BY scheduled_at LIMIT $1)
), claimable_full AS (
  SELECT coalesce(bool_or(n >= $1), false) AS is_full
  FROM (SELECT count(*) AS n FROM claimable GROUP BY flow) f
)`;

/**
 * The overview, in one statement: capped counts ($1 the cap) of running and failed runs (all,
 * and created in the last 24 h); of ready (due), retrying and scheduled (not yet due) steps
 * from `claimable`, with `claimable_capped` when some flow had $1 or more; of running steps and
 * expired leases (the lease index); the oldest due step's age (ms); the planner's estimate of all
 * runs; the workers seen within $2 ms.
 */
export const overviewSql = (s: string) => `
WITH ${claimableCte(s)}
SELECT (SELECT count(*)::int FROM (SELECT 1 FROM ${s}.cyclone_runs
          WHERE state = 'running' LIMIT $1) c) AS runs_running,
       (SELECT count(*)::int FROM (SELECT 1 FROM ${s}.cyclone_runs
          WHERE state = 'failed' LIMIT $1) c) AS runs_failed,
       (SELECT count(*)::int FROM (SELECT 1 FROM ${s}.cyclone_runs
          WHERE state = 'failed' AND created_at >= now() - interval '24 hours' LIMIT $1) c)
         AS runs_failed_24h,
       (SELECT greatest(reltuples, 0)::float8 FROM pg_class
         WHERE oid = '${s}.cyclone_runs'::regclass) AS runs_estimate,
       (SELECT count(*)::int FROM claimable WHERE scheduled_at <= now()) AS steps_ready,
       (SELECT count(*)::int FROM claimable WHERE state = 'retryable') AS steps_retrying,
       (SELECT count(*)::int FROM claimable WHERE scheduled_at > now()) AS steps_scheduled,
       (SELECT is_full FROM claimable_full) AS claimable_capped,
       (SELECT count(*)::int FROM (SELECT 1 FROM ${s}.cyclone_steps
          WHERE lease_expires_at IS NOT NULL AND state = 'running' LIMIT $1) c) AS steps_running,
       (SELECT count(*)::int FROM (SELECT 1 FROM ${s}.cyclone_steps
          WHERE lease_expires_at IS NOT NULL AND lease_expires_at < now() LIMIT $1) c)
         AS leases_expired,
       coalesce((SELECT (extract(epoch FROM (now() - min(scheduled_at))) * 1000)::float8
                 FROM claimable WHERE scheduled_at <= now()), 0) AS queue_lag_ms,
       (SELECT count(*)::int FROM ${s}.cyclone_workers
         WHERE last_seen_at >= now() - $2::float8 * interval '1 millisecond') AS workers_alive,
       to_json(now()) #>> '{}' AS at`;

/** The newest $1 failed runs (the overview's list). */
export const recentFailedRunsSql = (s: string) => `
SELECT ${RUN_COLUMNS} FROM ${s}.cyclone_runs
WHERE state = 'failed' ORDER BY created_at DESC, id DESC LIMIT $1`;

const NEWEST_FIRST = 'created_at DESC, id DESC';
const OLDEST_FIRST = 'created_at ASC, id ASC';

/** The filters of a runs page, as the SQL text needs them (values bound separately). */
export interface RunsPageShape {
  workflow: boolean;
  state: RunStateFilter | null;
  from: boolean;
  to: boolean;
  /** Keyset position: rows strictly older (`older`) or newer (`newer`) than the cursor. */
  cursor: 'older' | 'newer' | null;
}

/**
 * One page of runs: the WHERE clause holds only the filters present (`shape`), the state as a
 * literal of `RUN_STATES`; `older` pages read newest first, `newer` pages oldest first (the
 * caller reverses them). Parameters in order: workflow, from, to, cursor created_at, cursor id
 * (each only when present), then the limit.
 */
export function runsPageSql(s: string, shape: RunsPageShape): string {
  const clauses: string[] = [];
  let n = 0;
  if (shape.workflow) clauses.push(`workflow = $${++n}`);
  if (shape.state !== null) {
    const clause = STATE_CLAUSE[shape.state];
    if (clause === undefined) throw new Error(`not a run state: ${String(shape.state)}`);
    clauses.push(clause);
  }
  if (shape.from) clauses.push(`created_at >= $${++n}::timestamptz`);
  if (shape.to) clauses.push(`created_at < $${++n}::timestamptz`);
  if (shape.cursor === 'older') {
    clauses.push(`(created_at, id) < ($${++n}::timestamptz, $${++n}::uuid)`);
  } else if (shape.cursor === 'newer') {
    clauses.push(`(created_at, id) > ($${++n}::timestamptz, $${++n}::uuid)`);
  }
  const where = clauses.length > 0 ? ` WHERE ${clauses.join(' AND ')}` : '';
  const order = shape.cursor === 'newer' ? OLDEST_FIRST : NEWEST_FIRST;
  return `SELECT ${RUN_COLUMNS} FROM ${s}.cyclone_runs${where} ORDER BY ${order} LIMIT $${++n}`;
}

/** A run by id, with its list columns. $1 run id. */
export const runByIdSql = (s: string) => `
SELECT ${RUN_COLUMNS} FROM ${s}.cyclone_runs WHERE id = $1`;

/**
 * The runs whose submit key is $1, in any workflow, at most $2: the workflow names are walked
 * by a loose index scan (one probe of the workflow index per name), and each (workflow, key)
 * goes by the submit key's unique index; no index on the key alone is needed.
 */
export const runsBySubmitKeySql = (s: string) => `
WITH RECURSIVE w AS (
  (SELECT workflow FROM ${s}.cyclone_runs ORDER BY workflow LIMIT 1)
  UNION ALL
  SELECT (SELECT r.workflow FROM ${s}.cyclone_runs r WHERE r.workflow > w.workflow
          ORDER BY r.workflow LIMIT 1)
  FROM w WHERE w.workflow IS NOT NULL
)
SELECT r.id, r.workflow FROM w JOIN ${s}.cyclone_runs r
  ON r.workflow = w.workflow AND r.submit_key = $1
ORDER BY r.workflow LIMIT $2`;

/** The run of workflow $1 with submit key $2 (the submit key's unique index). */
export const runBySubmitKeySql = (s: string) => `
SELECT id, workflow FROM ${s}.cyclone_runs WHERE workflow = $1 AND submit_key = $2`;

/**
 * A run's header for its page: list columns, counters, sizes, keys, and its number of steps
 * (`steps_total`, counted on the steps' primary key: the page may carry only the first ones).
 * $1 run id.
 */
export const runHeaderSql = (s: string) => `
SELECT ${RUN_COLUMNS}, steps_active, updated_at, pg_column_size(input) AS input_bytes,
       debounce_key, traceparent,
       (SELECT count(*) FROM ${s}.cyclone_steps st WHERE st.run_id = $1)::int AS steps_total
FROM ${s}.cyclone_runs WHERE id = $1`;

/** The columns of a step's summary (no bodies: sizes and the last error's first 300 chars). */
const STEP_COLUMNS = `node, action, state, attempt, max_attempts, deps_remaining, downstream,
       ancestors, scheduled_at, lease_owner, lease_expires_at, started_at, completed_at,
       jsonb_array_length(errors) AS error_count,
       left(errors -> -1 ->> 'message', 300) AS last_error,
       errors -> -1 ->> 'kind' AS last_error_kind,
       pg_column_size(output) AS output_bytes, snoozes, wait_for, reopened_after_attempt`;

/** A run's steps as summaries, in topological order then by name, at most $2. $1 run id. */
export const runStepsSql = (s: string) => `
SELECT ${STEP_COLUMNS} FROM ${s}.cyclone_steps WHERE run_id = $1
ORDER BY cardinality(ancestors), node LIMIT $2`;

/**
 * A run's input as JSON text: its byte length and the text itself, or only its first $2
 * characters when it has more (`truncated`). $1 run id. `OFFSET 0` keeps PostgreSQL from
 * inlining the subquery, which would convert the input to text once for each use of `t` (four).
 */
export const runInputSql = (s: string) => `
SELECT octet_length(t) AS bytes, length(t) > $2 AS truncated,
       CASE WHEN length(t) <= $2 THEN t ELSE left(t, $2) END AS text
FROM (SELECT input::text AS t FROM ${s}.cyclone_runs WHERE id = $1 OFFSET 0) x`;

/**
 * One step in full: its summary, the newest $4 error entries (newest first), its output's byte
 * length and the output as JSON text, or only its first $3 characters when it has more
 * (`output_truncated`). $1 run id, $2 node. `OFFSET 0` keeps PostgreSQL from inlining the
 * subquery, which would convert the output to text once for each use of `o` (four: ~15 s for 50 MB).
 */
export const stepDetailSql = (s: string) => `
SELECT ${STEP_COLUMNS}, signalled, wait_deadline, delay_ms,
       (SELECT coalesce(jsonb_agg(errors -> (jsonb_array_length(errors) - k) ORDER BY k), '[]')
          FROM generate_series(1, least(jsonb_array_length(errors), $4)) k)::text AS recent_errors,
       octet_length(o) AS output_text_bytes, length(o) > $3 AS output_truncated,
       CASE WHEN length(o) <= $3 THEN o ELSE left(o, $3) END AS output_text
FROM (SELECT *, output::text AS o FROM ${s}.cyclone_steps WHERE run_id = $1 AND node = $2 OFFSET 0) x`;

/** The nodes of run $1 that list node $2 downstream: its direct upstream nodes. */
export const upstreamOfSql = (s: string) => `
SELECT node FROM ${s}.cyclone_steps WHERE run_id = $1 AND $2 = ANY(downstream) ORDER BY node`;

/** A step's whole output as JSON text (NULL when it has none). $1 run id, $2 node. */
export const stepOutputSql = (s: string) => `
SELECT output::text AS text FROM ${s}.cyclone_steps WHERE run_id = $1 AND node = $2`;

/**
 * The workflows that have runs (a loose index scan of the workflow index: one probe per name),
 * each with its running and failed runs counted among the first $1 running and the first $1
 * failed runs (read by the state index), and its newest run's creation time.
 */
export const workflowsSql = (s: string) => `
WITH RECURSIVE w AS (
  (SELECT workflow FROM ${s}.cyclone_runs ORDER BY workflow LIMIT 1)
  UNION ALL
  SELECT (SELECT r.workflow FROM ${s}.cyclone_runs r WHERE r.workflow > w.workflow
          ORDER BY r.workflow LIMIT 1)
  FROM w WHERE w.workflow IS NOT NULL
), running AS (
  SELECT workflow, count(*)::int AS n
  FROM (SELECT workflow FROM ${s}.cyclone_runs WHERE state = 'running' LIMIT $1) x
  GROUP BY workflow
), failed AS (
  SELECT workflow, count(*)::int AS n
  FROM (SELECT workflow FROM ${s}.cyclone_runs WHERE state = 'failed' LIMIT $1) x
  GROUP BY workflow
)
SELECT w.workflow,
       coalesce(running.n, 0) AS running,
       coalesce((SELECT sum(n) FROM running), 0) >= $1 AS running_capped,
       coalesce(failed.n, 0) AS failed,
       coalesce((SELECT sum(n) FROM failed), 0) >= $1 AS failed_capped,
       (SELECT r.created_at FROM ${s}.cyclone_runs r WHERE r.workflow = w.workflow
        ORDER BY r.workflow DESC, r.created_at DESC, r.id DESC LIMIT 1) AS last_created_at
FROM w
LEFT JOIN running ON running.workflow = w.workflow
LEFT JOIN failed ON failed.workflow = w.workflow
WHERE w.workflow IS NOT NULL
ORDER BY w.workflow`;

/**
 * The leases held now, per owner (the lease index holds exactly the leased steps, bounded by the
 * workers' total concurrency): steps, the next expiry, how many are expired.
 */
export const leaseOwnersSql = (s: string) => `
SELECT lease_owner AS owner, count(*)::int AS steps, min(lease_expires_at) AS next_expiry,
       (count(*) FILTER (WHERE lease_expires_at < now()))::int AS expired
FROM ${s}.cyclone_steps WHERE lease_expires_at IS NOT NULL
GROUP BY lease_owner ORDER BY lease_owner`;

/**
 * Health counts: expired leases not yet swept (up to $1, by the lease index), and from
 * `claimable` the retrying steps and, per workflow and action, the due steps, the oldest one's
 * due time and lag; `claimable_capped` as in the overview.
 */
export const healthSql = (s: string) => `
WITH ${claimableCte(s)}
SELECT (SELECT count(*)::int FROM (SELECT 1 FROM ${s}.cyclone_steps
          WHERE lease_expires_at IS NOT NULL AND lease_expires_at < now() LIMIT $1) c)
         AS leases_expired,
       (SELECT count(*)::int FROM claimable WHERE state = 'retryable') AS steps_retrying,
       (SELECT is_full FROM claimable_full) AS claimable_capped,
       (SELECT coalesce(json_agg(d ORDER BY d.oldest), '[]')::text FROM (
          SELECT workflow, action, min(scheduled_at) AS oldest, count(*)::int AS due,
                 (extract(epoch FROM (now() - min(scheduled_at))) * 1000)::float8 AS lag_ms
          FROM claimable WHERE scheduled_at <= now()
          GROUP BY workflow, action) d) AS due_by_action,
       to_json(now()) #>> '{}' AS at`;

const overviewStatement = defineStatement('ui_overview', overviewSql, false);
const recentFailedStatement = defineStatement('ui_recent_failed', recentFailedRunsSql, false);
const runByIdStatement = defineStatement('ui_run_by_id', runByIdSql, false);
const bySubmitKeyStatement = defineStatement('ui_runs_by_submit_key', runsBySubmitKeySql, false);
const runBySubmitKeyStatement = defineStatement('ui_run_by_submit_key', runBySubmitKeySql, false);
const runHeaderStatement = defineStatement('ui_run_header', runHeaderSql, false);
const runStepsStatement = defineStatement('ui_run_steps', runStepsSql, false);
const runInputStatement = defineStatement('ui_run_input', runInputSql, false);
const stepDetailStatement = defineStatement('ui_step_detail', stepDetailSql, false);
const upstreamOfStatement = defineStatement('ui_upstream_of', upstreamOfSql, false);
const stepOutputStatement = defineStatement('ui_step_output', stepOutputSql, false);
const workflowsStatement = defineStatement('ui_workflows', workflowsSql, false);
const leaseOwnersStatement = defineStatement('ui_lease_owners', leaseOwnersSql, false);
const healthStatement = defineStatement('ui_health', healthSql, false);

/** The overview row (`overviewSql`). */
export async function overview(on: Queryable, db: SqlScope, cap: number, aliveMs: number) {
  const { rows } = await send<Row>(on, overviewStatement(db), [cap, aliveMs]);
  return rows[0];
}

/** The newest `limit` failed runs. */
export async function recentFailedRuns(on: Queryable, db: SqlScope, limit: number) {
  return (await send<Row>(on, recentFailedStatement(db), [limit])).rows;
}

/** One page of runs (`runsPageSql`); `values` in its parameter order. */
export async function runsPage(
  on: Queryable,
  db: SqlScope,
  shape: RunsPageShape,
  values: unknown[],
) {
  return (await on.query(runsPageSql(db.q, shape), values)).rows as Row[];
}

/** A run's list row, or undefined. */
export async function runById(on: Queryable, db: SqlScope, runId: string) {
  return (await send<Row>(on, runByIdStatement(db), [runId])).rows[0];
}

/** Runs whose submit key is `key`, in any workflow, at most `limit`. */
export async function runsBySubmitKey(on: Queryable, db: SqlScope, key: string, limit: number) {
  return (await send<Row>(on, bySubmitKeyStatement(db), [key, limit])).rows;
}

/** The run of `workflow` with submit key `key`, or undefined. */
export async function runBySubmitKey(on: Queryable, db: SqlScope, workflow: string, key: string) {
  return (await send<Row>(on, runBySubmitKeyStatement(db), [workflow, key])).rows[0];
}

/** A run's header row, or undefined. */
export async function runHeader(on: Queryable, db: SqlScope, runId: string) {
  return (await send<Row>(on, runHeaderStatement(db), [runId])).rows[0];
}

/** A run's step summaries, at most `limit`. */
export async function runSteps(on: Queryable, db: SqlScope, runId: string, limit: number) {
  return (await send<Row>(on, runStepsStatement(db), [runId, limit])).rows;
}

/** A run's input (`runInputSql`), or undefined. */
export async function runInput(on: Queryable, db: SqlScope, runId: string, previewChars: number) {
  return (await send<Row>(on, runInputStatement(db), [runId, previewChars])).rows[0];
}

/** One step in full (`stepDetailSql`), or undefined. */
export async function stepDetail(
  on: Queryable,
  db: SqlScope,
  p: { runId: string; node: string; previewChars: number; maxErrors: number },
) {
  const values = [p.runId, p.node, p.previewChars, p.maxErrors];
  return (await send<Row>(on, stepDetailStatement(db), values)).rows[0];
}

/** The direct upstream nodes of a step. */
export async function upstreamOf(
  on: Queryable,
  db: SqlScope,
  runId: string,
  node: string,
): Promise<string[]> {
  const { rows } = await send<{ node: string }>(on, upstreamOfStatement(db), [runId, node]);
  return rows.map((r) => r.node);
}

/** A step's whole output (`{ text }`), or undefined when there is no such step. */
export async function stepOutput(
  on: Queryable,
  db: SqlScope,
  runId: string,
  node: string,
): Promise<{ text: string | null } | undefined> {
  return (await send<Row>(on, stepOutputStatement(db), [runId, node])).rows[0];
}

/** The workflows (`workflowsSql`). */
export async function workflows(on: Queryable, db: SqlScope, cap: number) {
  return (await send<Row>(on, workflowsStatement(db), [cap])).rows;
}

/** The leases held, per owner. */
export async function leaseOwners(on: Queryable, db: SqlScope) {
  return (await send<Row>(on, leaseOwnersStatement(db), [])).rows;
}

/** The health counts (`healthSql`). */
export async function health(on: Queryable, db: SqlScope, cap: number) {
  return (await send<Row>(on, healthStatement(db), [cap])).rows[0];
}
