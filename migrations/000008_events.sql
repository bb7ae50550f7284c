-- Cyclone core schema, version 8: events and branches. A signal is stored per (run, name), the
-- first one standing, whatever the run's progress; a wait node is a step with `wait_for` (the
-- signal's name) that waits `scheduled` until its signal or its deadline, holding no worker; a
-- conditional node whose condition is false ends `skipped` (done, for its downstream nodes).
--
-- `signalled` is set on every wait step of the signal's name by the signal's own transaction,
-- under the step's row lock, so a signal and the release of its wait node cannot miss each other
-- whichever commits first. Replacing the state CHECK reads every row of cyclone_steps under a
-- lock against writes: on a very large table, migrate at a quiet moment.
CREATE TABLE {{schema}}.cyclone_signals (
  run_id     uuid        NOT NULL REFERENCES {{schema}}.cyclone_runs (id) ON DELETE CASCADE,
  name       text        NOT NULL,
  payload    jsonb       NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (run_id, name)
);

ALTER TABLE {{schema}}.cyclone_steps DROP CONSTRAINT cyclone_steps_state_check;
ALTER TABLE {{schema}}.cyclone_steps ADD CONSTRAINT cyclone_steps_state_check
  CHECK (state IN ('pending', 'available', 'scheduled', 'running', 'retryable',
                   'completed', 'skipped', 'discarded', 'cancelled'));

ALTER TABLE {{schema}}.cyclone_steps ADD COLUMN wait_for text;
ALTER TABLE {{schema}}.cyclone_steps ADD COLUMN wait_timeout_ms bigint
  CHECK (wait_timeout_ms >= 0);
ALTER TABLE {{schema}}.cyclone_steps ADD COLUMN wait_deadline timestamptz;
ALTER TABLE {{schema}}.cyclone_steps ADD COLUMN signalled boolean NOT NULL DEFAULT false;
