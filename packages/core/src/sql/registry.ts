/**
 * The worker registry and the throughput counts: the statements on `cyclone_workers` and
 * `cyclone_throughput` (migration 11). Each worker sends one of them every few seconds (the
 * workers on one caller-given pool one between them), never per step, and the operator's reads
 * go by primary keys or read these small tables whole.
 */
import { defineStatement, type Queryable, type SqlScope, send } from './statement.js';

/**
 * The tail both reports share: adds the counts ($p minute, $p+1 workflow, $p+2 completed, $p+3
 * failed, $p+4 discarded) into `cyclone_throughput`, deletes buckets older than $p+5 ms, and
 * returns how many stale worker rows the `gone` CTE before it deleted.
 */
const countedSql = (s: string, p: number) => `counted AS (
  INSERT INTO ${s}.cyclone_throughput AS t (minute, workflow, completed, failed, discarded)
  SELECT * FROM unnest($${p}::timestamptz[], $${p + 1}::text[], $${p + 2}::bigint[],
                       $${p + 3}::bigint[], $${p + 4}::bigint[])
  ON CONFLICT (minute, workflow) DO UPDATE
  SET completed = t.completed + excluded.completed, failed = t.failed + excluded.failed,
      discarded = t.discarded + excluded.discarded
  RETURNING 1
), expired AS (
  DELETE FROM ${s}.cyclone_throughput
  WHERE minute < now() - $${p + 5}::float8 * interval '1 millisecond'
  RETURNING 1
)
SELECT (SELECT count(*) FROM gone)::int AS pruned`;

/**
 * One report of a worker, in one statement: upserts its row (`started_at` reset when $15 is
 * true, the start), deletes the rows of other workers not seen for $8 ms (they died without a
 * graceful stop), adds the outcome counts given as parallel arrays ($9 minute, $10 workflow,
 * $11 completed, $12 failed, $13 discarded; unique per minute and workflow, sorted so that two
 * workers adding to the same buckets lock them in one order) and deletes buckets older than $14
 * ms. $1 worker id, $2 host, $3 pid, $4 version, $5 concurrency, $6 steps in flight, $7
 * workflows. Returns how many stale worker rows it deleted.
 */
export const reportWorkerSql = (s: string) => `
WITH w AS (
  INSERT INTO ${s}.cyclone_workers AS cw
    (worker_id, host, pid, version, concurrency, in_flight, workflows)
  VALUES ($1, $2, $3, $4, $5, $6, $7)
  ON CONFLICT (worker_id) DO UPDATE
  SET host = excluded.host, pid = excluded.pid, version = excluded.version,
      concurrency = excluded.concurrency, in_flight = excluded.in_flight,
      workflows = excluded.workflows, last_seen_at = now(),
      started_at = CASE WHEN $15::boolean THEN now() ELSE cw.started_at END
  RETURNING 1
), gone AS (
  DELETE FROM ${s}.cyclone_workers
  WHERE last_seen_at < now() - $8::float8 * interval '1 millisecond' AND worker_id <> $1
  RETURNING 1
), ${countedSql(s, 9)}`;

/**
 * The report of the workers sharing one pool, in one statement (`reportWorkerSql` for several):
 * upserts each worker's row from $1, a JSON array of `{worker_id, concurrency, in_flight,
 * workflows}` (every row's `last_seen_at` now, `started_at` reset for the ids in $5, the workers
 * starting), with their process's $2 host, $3 pid and $4 version; deletes the rows of other
 * workers not seen for $6 ms; adds the counts of all of them summed per minute and workflow ($7
 * minute, $8 workflow, $9 completed, $10 failed, $11 discarded; unique and sorted as in
 * `reportWorkerSql`) and deletes buckets older than $12 ms. Rows upserted in worker id order, so
 * that two such reports never wait on each other in opposite orders. Returns how many stale worker
 * rows it deleted.
 */
export const reportWorkersSql = (s: string) => `
WITH r AS (
  SELECT * FROM jsonb_to_recordset($1::jsonb)
    AS r(worker_id text, concurrency int, in_flight int, workflows text[])
), w AS (
  INSERT INTO ${s}.cyclone_workers AS cw
    (worker_id, host, pid, version, concurrency, in_flight, workflows)
  SELECT r.worker_id, $2, $3, $4, r.concurrency, r.in_flight, r.workflows
  FROM r ORDER BY r.worker_id
  ON CONFLICT (worker_id) DO UPDATE
  SET host = excluded.host, pid = excluded.pid, version = excluded.version,
      concurrency = excluded.concurrency, in_flight = excluded.in_flight,
      workflows = excluded.workflows, last_seen_at = now(),
      started_at = CASE WHEN excluded.worker_id = ANY ($5::text[]) THEN now()
                        ELSE cw.started_at END
  RETURNING 1
), gone AS (
  DELETE FROM ${s}.cyclone_workers d
  WHERE d.last_seen_at < now() - $6::float8 * interval '1 millisecond'
    AND NOT EXISTS (SELECT 1 FROM r WHERE r.worker_id = d.worker_id)
  RETURNING 1
), ${countedSql(s, 7)}`;

/** Deletes a worker's row (its graceful stop). $1 worker id. */
export const removeWorkerSql = (s: string) =>
  `DELETE FROM ${s}.cyclone_workers WHERE worker_id = $1`;

/**
 * The registered workers, most recently started first, with `alive`: seen within $1 ms.
 * Timestamps as ISO-8601 UTC text (`to_json`), so callers choose Date or string.
 */
export const listWorkersSql = (s: string) => `
SELECT worker_id, host, pid, version, concurrency, in_flight, workflows,
       to_json(started_at) #>> '{}' AS started_at, to_json(last_seen_at) #>> '{}' AS last_seen_at,
       last_seen_at >= now() - $1::float8 * interval '1 millisecond' AS alive
FROM ${s}.cyclone_workers
ORDER BY started_at DESC, worker_id`;

/**
 * Outcome counts per bucket of $1 seconds over the last $2 seconds, oldest first, every bucket
 * present (zeros where nothing was counted), of workflow $3 or of all when NULL. Reads the
 * buckets of the window by the primary key (minute first).
 */
export const throughputSql = (s: string) => `
WITH b AS (
  SELECT to_timestamp(floor(extract(epoch FROM now()) / $1::int) * $1::int) AS last_bucket
), buckets AS (
  SELECT g AS t
  FROM b, generate_series(b.last_bucket - ($2::int - $1::int) * interval '1 second',
                          b.last_bucket, $1::int * interval '1 second') g
), counts AS (
  SELECT to_timestamp(floor(extract(epoch FROM minute) / $1::int) * $1::int) AS t,
         sum(completed)::float8 AS completed, sum(failed)::float8 AS failed,
         sum(discarded)::float8 AS discarded
  FROM ${s}.cyclone_throughput, b
  WHERE minute >= b.last_bucket - ($2::int - $1::int) * interval '1 second'
    AND ($3::text IS NULL OR workflow = $3)
  GROUP BY 1
)
SELECT to_json(buckets.t) #>> '{}' AS t, coalesce(c.completed, 0) AS completed,
       coalesce(c.failed, 0) AS failed, coalesce(c.discarded, 0) AS discarded
FROM buckets LEFT JOIN counts c ON c.t = buckets.t
ORDER BY buckets.t`;

/** A worker's report (`reportWorkerSql`). */
export interface WorkerReport {
  workerId: string;
  host: string;
  pid: number;
  version: string | null;
  concurrency: number;
  inFlight: number;
  workflows: readonly string[];
  /** Rows of other workers not seen for this long (ms) are deleted. */
  staleAfterMs: number;
  /** Outcome counts to add, one per (minute, workflow), sorted by minute then workflow. */
  counts: readonly ThroughputCount[];
  /** Throughput buckets older than this (ms) are deleted. */
  keepThroughputMs: number;
  /** The worker's start: `started_at` is reset. */
  starting: boolean;
}

/** The report of several workers of one process (`reportWorkersSql`). */
export interface WorkersReport {
  host: string;
  pid: number;
  version: string | null;
  workers: readonly {
    workerId: string;
    concurrency: number;
    inFlight: number;
    workflows: readonly string[];
    /** The worker's start: its `started_at` is reset. */
    starting: boolean;
  }[];
  /** Rows of other workers not seen for this long (ms) are deleted. */
  staleAfterMs: number;
  /** Outcome counts to add, summed over the workers, one per (minute, workflow), sorted. */
  counts: readonly ThroughputCount[];
  /** Throughput buckets older than this (ms) are deleted. */
  keepThroughputMs: number;
}

/** Outcomes counted in one minute of one workflow. */
export interface ThroughputCount {
  /** Start of the minute, ms since the epoch (a multiple of 60,000). */
  minute: number;
  workflow: string;
  completed: number;
  failed: number;
  discarded: number;
}

/** A row of `cyclone_workers`, timestamps as ISO-8601 UTC text. */
export interface WorkerRow {
  worker_id: string;
  host: string;
  pid: number;
  version: string | null;
  concurrency: number;
  in_flight: number;
  workflows: string[];
  started_at: string;
  last_seen_at: string;
  alive: boolean;
}

/** A bucket of `throughputSql`: its start (ISO-8601 UTC text) and its counts. */
export interface ThroughputRow {
  t: string;
  completed: number;
  failed: number;
  discarded: number;
}

const reportStatement = defineStatement('report_worker', reportWorkerSql);
const reportManyStatement = defineStatement('report_workers', reportWorkersSql);
const removeStatement = defineStatement('remove_worker', removeWorkerSql, false);
const listStatement = defineStatement('list_workers', listWorkersSql, false);
const throughputStatement = defineStatement('throughput', throughputSql, false);

/** The five arrays of `countedSql`'s parameters: minutes, workflows, completed, failed, discarded. */
function countParams(counts: readonly ThroughputCount[]) {
  return [
    counts.map((c) => new Date(c.minute)),
    counts.map((c) => c.workflow),
    counts.map((c) => c.completed),
    counts.map((c) => c.failed),
    counts.map((c) => c.discarded),
  ] as const;
}

/** Sends a worker's report. @returns how many stale worker rows were deleted. */
export async function reportWorker(on: Queryable, db: SqlScope, r: WorkerReport): Promise<number> {
  const { rows } = await send<{ pruned: number }>(on, reportStatement(db), [
    r.workerId,
    r.host,
    r.pid,
    r.version,
    r.concurrency,
    r.inFlight,
    r.workflows,
    r.staleAfterMs,
    ...countParams(r.counts),
    r.keepThroughputMs,
    r.starting,
  ]);
  return rows[0]?.pruned ?? 0;
}

/** Sends the report of several workers. @returns how many stale worker rows were deleted. */
export async function reportWorkers(
  on: Queryable,
  db: SqlScope,
  r: WorkersReport,
): Promise<number> {
  const workers = r.workers.map((w) => ({
    worker_id: w.workerId,
    concurrency: w.concurrency,
    in_flight: w.inFlight,
    workflows: w.workflows,
  }));
  const { rows } = await send<{ pruned: number }>(on, reportManyStatement(db), [
    JSON.stringify(workers),
    r.host,
    r.pid,
    r.version,
    r.workers.filter((w) => w.starting).map((w) => w.workerId),
    r.staleAfterMs,
    ...countParams(r.counts),
    r.keepThroughputMs,
  ]);
  return rows[0]?.pruned ?? 0;
}

/** Deletes a worker's row. */
export async function removeWorker(on: Queryable, db: SqlScope, workerId: string): Promise<void> {
  await send(on, removeStatement(db), [workerId]);
}

/** The registered workers; `alive` when seen within `aliveWithinMs`. */
export async function listWorkers(
  on: Queryable,
  db: SqlScope,
  aliveWithinMs: number,
): Promise<WorkerRow[]> {
  const { rows } = await send<WorkerRow>(on, listStatement(db), [aliveWithinMs]);
  return rows;
}

/**
 * Outcome counts per bucket of `bucketSeconds` over the last `windowSeconds` (a multiple of
 * it), oldest first, zeros included; of one workflow or, when null, of all.
 */
export async function throughput(
  on: Queryable,
  db: SqlScope,
  p: { bucketSeconds: number; windowSeconds: number; workflow: string | null },
): Promise<ThroughputRow[]> {
  const { rows } = await send<ThroughputRow>(on, throughputStatement(db), [
    p.bucketSeconds,
    p.windowSeconds,
    p.workflow,
  ]);
  return rows;
}
