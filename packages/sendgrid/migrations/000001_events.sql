-- @cyclone/sendgrid, version 1 (component `sendgrid` in cyclone_migrations). Append-only: never
-- edit once released; add a new file. `{{schema}}` is replaced by the configured, validated and
-- quoted schema name.
--
-- Event Webhook events that carry a `cyclone_key` custom arg, recorded by the webhook handler
-- (README § Event Webhook). They prove that SendGrid accepted the send request of that key:
-- the reconciler of an unknown outcome reads them (PROVIDERS.md § 2.2, § 2.5). No foreign key
-- to the runs: events may arrive after a run was deleted, and rows are reaped by received_at.

CREATE TABLE {{schema}}.cyclone_sendgrid_events (
  -- SendGrid's unique event id: the webhook retries deliveries, a repeat is ignored
  sg_event_id   text        PRIMARY KEY,
  cyclone_key   text        NOT NULL,
  -- the cyclone_run custom arg, when present and a uuid
  run_id        uuid,
  event         text        NOT NULL,
  -- per-recipient id `<X-Message-Id>.<suffix>`, and its X-Message-Id prefix
  sg_message_id text,
  message_id    text,
  email         text,
  -- the event's own timestamp (Unix seconds in the payload)
  occurred_at   timestamptz,
  received_at   timestamptz NOT NULL DEFAULT now(),
  payload       jsonb       NOT NULL
);

CREATE INDEX cyclone_sendgrid_events_key ON {{schema}}.cyclone_sendgrid_events (cyclone_key);
CREATE INDEX cyclone_sendgrid_events_received ON {{schema}}.cyclone_sendgrid_events (received_at);
