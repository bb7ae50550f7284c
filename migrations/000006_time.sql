-- Cyclone core schema, version 6: time. A step can wait for its time in state `scheduled` (a
-- delayed run, a node timer, a snooze); `snoozes` counts its snoozes; `delay_ms` is its node
-- timer, applied when its last upstream node completes; a run can carry a debounce key.
--
-- The claim index now holds `scheduled` rows too, keyed on scheduled_at, so a claim reads only
-- the due end of it (`scheduled_at <= now()`) and a backlog of future steps costs it nothing.
-- Replacing the state CHECK (it reads every row) and rebuilding that index lock cyclone_steps
-- against writes for as long as they take: on a very large table, migrate at a quiet moment.
ALTER TABLE {{schema}}.cyclone_steps DROP CONSTRAINT cyclone_steps_state_check;
ALTER TABLE {{schema}}.cyclone_steps ADD CONSTRAINT cyclone_steps_state_check
  CHECK (state IN ('pending', 'available', 'scheduled', 'running', 'retryable',
                   'completed', 'discarded', 'cancelled'));

ALTER TABLE {{schema}}.cyclone_steps ADD COLUMN snoozes int NOT NULL DEFAULT 0;
ALTER TABLE {{schema}}.cyclone_steps ADD COLUMN delay_ms bigint NOT NULL DEFAULT 0
  CHECK (delay_ms >= 0);

DROP INDEX {{schema}}.cyclone_steps_claimable;
CREATE INDEX cyclone_steps_claimable ON {{schema}}.cyclone_steps (scheduled_at)
  WHERE state IN ('available', 'retryable', 'scheduled');

-- Debounce: at most one open run per (workflow, key); the key is taken off a run once it started.
ALTER TABLE {{schema}}.cyclone_runs ADD COLUMN debounce_key text;
CREATE UNIQUE INDEX cyclone_runs_debounce_key ON {{schema}}.cyclone_runs (workflow, debounce_key)
  WHERE debounce_key IS NOT NULL;
