-- Cyclone core schema, version 6: the submit-key index holds only runs that have a key.
-- Version 1 made (workflow, submit_key) a UNIQUE constraint, so every run, keyed or not, had an
-- entry in it, and every change of a run's state (a non-HOT update: state is indexed) added
-- another. Runs from `submit` and `submitMany` have no key; NULLs never conflict, so they need
-- no entry. One index insertion less per submitted and per finished run, and an index that stays
-- the size of the keyed runs as history grows (measured by bench/, scenario 7). `submitOnce`
-- names this index's predicate in its ON CONFLICT clause (sql.ts, insertRun). Building it locks
-- cyclone_runs against writes while it runs: on a very large table, migrate at a quiet moment.
ALTER TABLE {{schema}}.cyclone_runs DROP CONSTRAINT cyclone_runs_submit_key;
CREATE UNIQUE INDEX cyclone_runs_submit_key ON {{schema}}.cyclone_runs (workflow, submit_key)
  WHERE submit_key IS NOT NULL;
