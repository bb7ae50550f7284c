-- Cyclone core schema, version 10: flow control (docs/flow-control.md). Concurrency limits,
-- rate limits and keys per action, and a priority per step.
--
-- `flow` says which claim takes a step, fixed at submit from the definitions of the submitting
-- process: 0 the action has no limit (the plain claim); 1 it has a keyed limit and the step's
-- keys are not resolved yet (a worker computes them from the node's mapped input once the step
-- is due, then sets 2); 2 the limited claim takes it. `priority` (-1000 to 1000, higher first)
-- is the run's, carried by every step.
--
-- The claim index is rebuilt on (priority, scheduled_at) for flow 0 only: a claim reads each
-- priority present from its due end, so neither future-dated steps nor steps held back by a
-- limit are read by the plain claim. Rebuilding it and adding the CHECK read every row of
-- cyclone_steps under a lock against writes: on a very large table, migrate at a quiet moment.
ALTER TABLE {{schema}}.cyclone_steps ADD COLUMN priority int NOT NULL DEFAULT 0
  CONSTRAINT cyclone_steps_priority_range CHECK (priority BETWEEN -1000 AND 1000);
ALTER TABLE {{schema}}.cyclone_steps ADD COLUMN flow smallint NOT NULL DEFAULT 0
  CONSTRAINT cyclone_steps_flow_check CHECK (flow IN (0, 1, 2));
ALTER TABLE {{schema}}.cyclone_steps ADD COLUMN concurrency_key text;
ALTER TABLE {{schema}}.cyclone_steps ADD COLUMN rate_limit_key text;

DROP INDEX {{schema}}.cyclone_steps_claimable;
CREATE INDEX cyclone_steps_claimable ON {{schema}}.cyclone_steps (priority, scheduled_at)
  WHERE state IN ('available', 'retryable', 'scheduled') AND flow = 0;

-- The limited claim: per action, round-robin over keys (the concurrency key, else the rate-limit
-- key, '' for none), then priority and time within a key.
CREATE INDEX cyclone_steps_limited ON {{schema}}.cyclone_steps
  (action, (coalesce(concurrency_key, rate_limit_key, '')), priority DESC, scheduled_at)
  WHERE state IN ('available', 'retryable', 'scheduled') AND flow = 2;

-- Limited steps by due time: when the next one held for a later time (a delay, a snooze, a
-- retry's backoff) comes due, for the worker's idle wait.
CREATE INDEX cyclone_steps_limited_due ON {{schema}}.cyclone_steps (scheduled_at)
  WHERE state IN ('available', 'retryable', 'scheduled') AND flow = 2;

-- Steps whose keys are to be resolved, by due time.
CREATE INDEX cyclone_steps_keys_pending ON {{schema}}.cyclone_steps (scheduled_at)
  WHERE state IN ('available', 'retryable', 'scheduled') AND flow = 1;

-- The slots: running steps of limited actions, counted per action and per concurrency key.
-- Every transition out of `running` (completion, failure, snooze, cancel, the recovery sweep)
-- takes a row out of it, which is what frees a slot.
CREATE INDEX cyclone_steps_slots ON {{schema}}.cyclone_steps (action, concurrency_key)
  WHERE state = 'running' AND flow > 0;

-- Rate limits: a sliding-window log, one row per admission (a claim of a rate-limited action),
-- at the database's clock_timestamp() read after the action's advisory lock. `key` is the step's
-- rate-limit key, '' when it has none. Rows older than the longest period are pruned by the claim.
CREATE TABLE {{schema}}.cyclone_rate_admissions (
  action text        NOT NULL,
  key    text        NOT NULL,
  at     timestamptz NOT NULL
);
CREATE INDEX cyclone_rate_admissions_action ON {{schema}}.cyclone_rate_admissions (action, at);
CREATE INDEX cyclone_rate_admissions_key ON {{schema}}.cyclone_rate_admissions (action, key, at);

-- The limits the workers run with, as each worker records them when it starts (so that a
-- process without the definitions, such as the CLI, can show them). `keyed`: per key.
CREATE TABLE {{schema}}.cyclone_limits (
  action     text        NOT NULL,
  kind       text        NOT NULL CHECK (kind IN ('concurrency', 'rate')),
  keyed      boolean     NOT NULL,
  "limit"    int         NOT NULL CHECK ("limit" > 0),
  period_ms  int         CHECK (period_ms > 0),
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (action, kind, keyed)
);
