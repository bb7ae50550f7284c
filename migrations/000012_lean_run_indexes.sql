-- Fewer index entries written when a run finishes: its UPDATE cannot be HOT (state moves), so
-- every index of cyclone_runs whose predicate holds for the new row gets an entry.

-- Most runs have no submit key, and NULLs never conflict: only keyed runs need an entry. The
-- ON CONFLICT of a keyed submit names the predicate.
ALTER TABLE {{schema}}.cyclone_runs DROP CONSTRAINT cyclone_runs_submit_key;
CREATE UNIQUE INDEX cyclone_runs_submit_key ON {{schema}}.cyclone_runs (workflow, submit_key)
  WHERE submit_key IS NOT NULL;

-- Completed runs, nearly all of the history, are listed along cyclone_runs_created (all runs,
-- by created_at, id) with the state as a filter; the rarer states keep their own index.
DROP INDEX {{schema}}.cyclone_runs_state_created;
CREATE INDEX cyclone_runs_state_created ON {{schema}}.cyclone_runs (state, created_at, id)
  WHERE state <> 'completed';
