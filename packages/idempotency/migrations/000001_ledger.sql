-- @cyclone/idempotency ledger, version 1 (component `idempotency` in cyclone_migrations).
-- Append-only: never edit once released; add a new file. `{{schema}}` is replaced by the
-- configured, validated and quoted schema name. Needs the core schema (cyclone_runs).
--
-- One row per idempotency key `${run_id}:${node}[:${scope}]` (PROVIDERS.md § 4.2). The primary
-- key leads with run_id, so every statement is run-local (ARCHITECTURE.md § Data model) and no
-- second index is needed; the key alone is unique too, since it embeds the run id.

CREATE TABLE {{schema}}.cyclone_idempotency (
  run_id          uuid        NOT NULL REFERENCES {{schema}}.cyclone_runs (id) ON DELETE CASCADE,
  key             text        NOT NULL,
  node            text        NOT NULL,
  scope           text,
  -- free-form labels for operators, e.g. 'stripe' and 'POST /v1/payment_intents'
  provider        text,
  operation       text,
  -- SHA-256 (hex) of the canonical JSON of { provider, operation, request }
  request_hash    text        NOT NULL,
  phase           text        NOT NULL
                  CHECK (phase IN ('started', 'succeeded', 'failed', 'unknown')),
  -- bumped only by an operator retry after a definitive failure; the native key then ends in #g<n>
  generation      int         NOT NULL DEFAULT 0 CHECK (generation >= 0),
  -- the step attempt that holds the row (fencing token)
  owner_attempt   int         NOT NULL,
  -- when the last call was let through the fence; NULL: no call was made since the row was
  -- claimed (or the last one was provably not sent)
  call_started_at timestamptz,
  -- provider calls let through the fence for this key, across attempts and generations
  calls           int         NOT NULL DEFAULT 0 CHECK (calls >= 0),
  provider_ref    text,
  result          jsonb,
  error           jsonb,
  created_at      timestamptz NOT NULL DEFAULT now(),
  updated_at      timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (run_id, key)
) WITH (fillfactor = 80);
