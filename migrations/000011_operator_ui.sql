-- Cyclone core schema, version 11: what the operator UI reads without scanning the big tables.
--
-- cyclone_workers: one row per running Worker, inserted at start, refreshed by its registry
-- service every few seconds (last_seen_at, in_flight), deleted at its graceful stop; a worker
-- that died leaves its row behind until another worker's refresh deletes rows not seen for a
-- while. Small (one row per worker) and updated in place without indexed columns changing, so
-- its updates stay HOT.
CREATE TABLE {{schema}}.cyclone_workers (
  worker_id    text        PRIMARY KEY,
  host         text        NOT NULL,
  pid          int         NOT NULL,
  version      text,
  concurrency  int         NOT NULL,
  in_flight    int         NOT NULL DEFAULT 0,
  workflows    text[]      NOT NULL DEFAULT '{}',
  started_at   timestamptz NOT NULL DEFAULT now(),
  last_seen_at timestamptz NOT NULL DEFAULT now()
) WITH (fillfactor = 50);

-- cyclone_throughput: step outcomes per minute and workflow, counted by each worker in memory and
-- added with one upsert per flush (every few seconds), never per step; buckets older than 7 days
-- are deleted by the same flush. The UI's throughput chart reads this, not the runs.
CREATE TABLE {{schema}}.cyclone_throughput (
  minute    timestamptz NOT NULL,
  workflow  text        NOT NULL,
  -- attempts that completed the step (or skipped it)
  completed bigint      NOT NULL DEFAULT 0,
  -- attempts that failed (retryable or discarded)
  failed    bigint      NOT NULL DEFAULT 0,
  -- of those, attempts that discarded the step (attempts used up, or non-retryable)
  discarded bigint      NOT NULL DEFAULT 0,
  PRIMARY KEY (minute, workflow)
);

-- Keyset paging of runs newest first on (created_at, id), with no filter, by workflow and by
-- state: the id breaks ties between runs created in the same microsecond, so a page boundary
-- never skips or repeats a run. The workflow and state indexes of version 1 gain the id (same
-- number of indexes); the unfiltered one is new: one entry per run, written at submit, never
-- changed (created_at and id do not change), so run completions pay nothing more for it.
-- Building these reads cyclone_runs and blocks its writes meanwhile: on a very large table,
-- migrate at a quiet moment.
CREATE INDEX cyclone_runs_created ON {{schema}}.cyclone_runs (created_at, id);
DROP INDEX {{schema}}.cyclone_runs_workflow_created;
CREATE INDEX cyclone_runs_workflow_created ON {{schema}}.cyclone_runs (workflow, created_at, id);
DROP INDEX {{schema}}.cyclone_runs_state_created;
CREATE INDEX cyclone_runs_state_created ON {{schema}}.cyclone_runs (state, created_at, id);
