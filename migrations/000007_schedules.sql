-- Cyclone core schema, version 7: cron schedules. One row per schedule name, written by the
-- workers that carry the schedule (its definition, and last_seen_at while they run) and by the
-- operator (pause, resume, trigger), so both survive restarts.
--
-- Exactly one run per fire time, with no leader: a worker fires a time only when its UPDATE moves
-- last_fire_at forward to it, and submits the run in that transaction; the run's submit key
-- (`schedule:<name>:<fire time>`) is unique per workflow as well.
CREATE TABLE {{schema}}.cyclone_schedules (
  name                 text        PRIMARY KEY,
  cron                 text        NOT NULL,
  timezone             text        NOT NULL,
  workflow             text        NOT NULL,
  paused               boolean     NOT NULL DEFAULT false,
  -- Fire times at or before this never fire: the schedule's first sighting, or its last resume
  -- (no backfill of the time before it existed or while it was paused).
  fires_after          timestamptz NOT NULL DEFAULT now(),
  -- The latest fire time dealt with (fired, or passed over by the catch-up or overlap policy).
  last_fire_at         timestamptz,
  -- The run of the latest fire or trigger that made one; no foreign key: retention may delete it.
  last_run_id          uuid,
  next_fire_at         timestamptz,
  -- Fire times that made no run: passed over after downtime, skipped by overlap 'skip', or whose
  -- input could not be made.
  skipped_fires        bigint      NOT NULL DEFAULT 0,
  -- An operator's trigger (one run now, outside the cron) not yet fired; NULL when none.
  trigger_requested_at timestamptz,
  last_seen_at         timestamptz NOT NULL DEFAULT now(),
  created_at           timestamptz NOT NULL DEFAULT now(),
  updated_at           timestamptz NOT NULL DEFAULT now()
);
