-- @cyclone/twilio, version 1 (component `twilio` in cyclone_migrations). Append-only: never edit
-- once released; add a new file. `{{schema}}` is replaced by the configured, validated and
-- quoted schema name.
--
-- Status callbacks of messages sent through the adapter, recorded by the status-callback handler
-- (README § Status callbacks) under the key carried in the callback URL's `ck` parameter. A row
-- proves that Twilio created the message with that SID for that key: the reconciler of an
-- unknown outcome reads them first (PROVIDERS.md § 3.2, § 3.5). No foreign key to the runs:
-- callbacks may arrive after a run was deleted; rows are reaped by received_at.

CREATE TABLE {{schema}}.cyclone_twilio_callbacks (
  id             bigserial   PRIMARY KEY,
  cyclone_key    text        NOT NULL,
  message_sid    text        NOT NULL,
  message_status text        NOT NULL,
  error_code     text,
  account_sid    text,
  to_number      text,
  from_number    text,
  -- Twilio's I-Twilio-Idempotency-Token header of the delivery, when present
  delivery_token text,
  params         jsonb       NOT NULL,
  received_at    timestamptz NOT NULL DEFAULT now(),
  -- Twilio may deliver a callback more than once: one row per key, message and status
  CONSTRAINT cyclone_twilio_callbacks_unique UNIQUE (cyclone_key, message_sid, message_status)
);

CREATE INDEX cyclone_twilio_callbacks_received ON {{schema}}.cyclone_twilio_callbacks (received_at);
