-- Cyclone core schema, version 3: the claim index orders by scheduled_at alone.
-- The claim takes several workflows (`workflow = ANY(...)`); on (workflow, scheduled_at) that
-- cannot be read in scheduled_at order, so every claim sorted the whole claimable backlog
-- (measured by bench/: ~7 ms a claim at 20,000 claimable steps, growing with the backlog).
-- Read in scheduled_at order, a claim stops after LIMIT matching rows.
DROP INDEX {{schema}}.cyclone_steps_claimable;
CREATE INDEX cyclone_steps_claimable ON {{schema}}.cyclone_steps (scheduled_at)
  WHERE state IN ('available', 'retryable');
