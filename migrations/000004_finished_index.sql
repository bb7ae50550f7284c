-- Cyclone core schema, version 4: an index of finished runs by completed_at, for retention.
-- `Client.deleteFinishedRuns` (`cyclone cleanup`) deletes the oldest finished runs in batches
-- (`ORDER BY completed_at LIMIT n`); without this index every batch scanned the whole table.
-- Partial: running runs (the ones that change) are not in it. A run's completed_at and state
-- change together and only when it finishes or is retried, and state is indexed already, so the
-- counter updates of running runs stay HOT. Building it locks cyclone_runs against writes
-- (submits, run completions) for as long as it takes: on a very large table, migrate at a quiet
-- moment.
CREATE INDEX cyclone_runs_finished ON {{schema}}.cyclone_runs (completed_at)
  WHERE state IN ('completed', 'failed', 'cancelled');
