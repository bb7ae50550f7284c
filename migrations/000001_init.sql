-- Cyclone core schema, version 1. Append-only: never edit once released; add a new file.
-- `{{schema}}` is replaced by the configured, validated and quoted schema name.

CREATE TABLE {{schema}}.cyclone_runs (
  id              uuid        PRIMARY KEY,
  workflow        text        NOT NULL,
  state           text        NOT NULL
                  CHECK (state IN ('running', 'completed', 'failed', 'cancelled')),
  input           jsonb       NOT NULL,
  submit_key      text,
  input_hash      text        NOT NULL,
  steps_remaining int         NOT NULL CHECK (steps_remaining >= 0),
  -- steps that can still progress on their own: available, running or retryable. When it is 0
  -- and steps_remaining > 0, nothing can progress and the run is failed.
  steps_active    int         NOT NULL CHECK (steps_active >= 0),
  created_at      timestamptz NOT NULL DEFAULT now(),
  updated_at      timestamptz NOT NULL DEFAULT now(),
  completed_at    timestamptz,
  CONSTRAINT cyclone_runs_submit_key UNIQUE (workflow, submit_key)
) WITH (fillfactor = 80);

CREATE INDEX cyclone_runs_state_created ON {{schema}}.cyclone_runs (state, created_at DESC);
CREATE INDEX cyclone_runs_workflow_created ON {{schema}}.cyclone_runs (workflow, created_at DESC);

CREATE TABLE {{schema}}.cyclone_steps (
  run_id           uuid        NOT NULL REFERENCES {{schema}}.cyclone_runs (id) ON DELETE CASCADE,
  node             text        NOT NULL,
  workflow         text        NOT NULL,
  action           text        NOT NULL,
  state            text        NOT NULL
                   CHECK (state IN ('pending', 'available', 'running', 'retryable',
                                    'completed', 'discarded', 'cancelled')),
  attempt          int         NOT NULL DEFAULT 0,
  max_attempts     int         NOT NULL CHECK (max_attempts >= 1),
  deps_remaining   int         NOT NULL CHECK (deps_remaining >= 0),
  downstream       text[]      NOT NULL DEFAULT '{}',
  ancestors        text[]      NOT NULL DEFAULT '{}',
  scheduled_at     timestamptz NOT NULL DEFAULT now(),
  lease_owner      text,
  lease_expires_at timestamptz,
  output           jsonb,
  errors           jsonb       NOT NULL DEFAULT '[]',
  created_at       timestamptz NOT NULL DEFAULT now(),
  updated_at       timestamptz NOT NULL DEFAULT now(),
  started_at       timestamptz,
  completed_at     timestamptz,
  PRIMARY KEY (run_id, node)
) WITH (fillfactor = 70);

-- The claim query's index: only claimable rows are in it, so finished history does not slow it.
CREATE INDEX cyclone_steps_claimable ON {{schema}}.cyclone_steps (workflow, scheduled_at)
  WHERE state IN ('available', 'retryable');

-- The recovery sweep's index: only running rows.
CREATE INDEX cyclone_steps_leases ON {{schema}}.cyclone_steps (lease_expires_at)
  WHERE state = 'running';
