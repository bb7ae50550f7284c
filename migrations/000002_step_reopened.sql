-- Cyclone core schema, version 2: record operator retries on the step.
-- `reopened_after_attempt` is the attempt a step had reached when an operator last reopened it
-- (`retry`, `retryAll`, `cyclone retry`); NULL when it never was. Attempts after it come from that
-- retry, which is how @cyclone/idempotency tells an operator retry from an ordinary one.
ALTER TABLE {{schema}}.cyclone_steps ADD COLUMN reopened_after_attempt int;
