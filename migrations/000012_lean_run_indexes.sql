-- Fewer index entries written when a run finishes: its UPDATE cannot be HOT (state moves), so
-- every index of cyclone_runs whose predicate holds for the new row gets an entry.
--
-- Completed runs, nearly all of the history, are listed along cyclone_runs_created (all runs,
-- by created_at, id) with the state as a filter; the rarer states keep their own index.
--
-- The submit-key constraint stays as it is: the previous version's submit names it in an
-- ON CONFLICT without a predicate, which a partial unique index could not serve during a rolling
-- deploy. This version's submit names the predicate, so a later migration can make it partial.
DROP INDEX {{schema}}.cyclone_runs_state_created;
CREATE INDEX cyclone_runs_state_created ON {{schema}}.cyclone_runs (state, created_at, id)
  WHERE state <> 'completed';
