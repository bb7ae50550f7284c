/**
 * Cron schedules: the statements on `cyclone_schedules`. Workers upsert the definitions they
 * carry, read their rows with PostgreSQL's clock, and fire a time in a transaction that first
 * moves `last_fire_at` forward (only one worker's UPDATE can); the operator lists, pauses,
 * resumes and triggers. The workers' statements are prepared; the operator's go as plain text.
 */
import { defineStatement, type Queryable, type SqlScope, send } from './statement.js';

/**
 * Upserts the definitions a worker carries and marks them seen now; paused, the trigger and the
 * fire times are left as they are. Returns the names with a trigger waiting. Callers pass the
 * names sorted, so two workers lock the rows in one order. $1 names, $2 crons, $3 time zones,
 * $4 workflows, $5 next fire times.
 */
export const upsertSchedulesSql = (s: string) => `
INSERT INTO ${s}.cyclone_schedules AS t (name, cron, timezone, workflow, next_fire_at)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::timestamptz[])
ON CONFLICT (name) DO UPDATE
SET cron = EXCLUDED.cron, timezone = EXCLUDED.timezone, workflow = EXCLUDED.workflow,
    next_fire_at = EXCLUDED.next_fire_at, last_seen_at = now(),
    updated_at = CASE WHEN (t.cron, t.timezone, t.workflow)
                           IS DISTINCT FROM (EXCLUDED.cron, EXCLUDED.timezone, EXCLUDED.workflow)
                      THEN now() ELSE t.updated_at END
RETURNING t.name, t.trigger_requested_at IS NOT NULL AS trigger_pending`;

/**
 * PostgreSQL's clock and the state of the named schedules, one row per name ($1), with NULL
 * columns for a name that has no row.
 */
export const loadSchedulesSql = (s: string) => `
SELECT now() AS db_now, n.name, t.name IS NOT NULL AS found, t.paused, t.fires_after,
       t.last_fire_at, t.trigger_requested_at IS NOT NULL AS trigger_pending
FROM unnest($1::text[]) AS n(name)
LEFT JOIN ${s}.cyclone_schedules t ON t.name = n.name`;

/**
 * The exactly-once gate of a fire time: moves `last_fire_at` forward to $2 only when it is behind
 * it, the schedule is not paused, $2 is after `fires_after` and has come by PostgreSQL's clock.
 * A concurrent worker's UPDATE of the same row waits for this transaction and then finds
 * `last_fire_at` already there: no row. Adds $4 passed-over fire times to `skipped_fires`.
 * Returns the previous run (for the overlap check) when this call won. $1 name, $3 next fire.
 */
export const advanceScheduleSql = (s: string) => `
UPDATE ${s}.cyclone_schedules
SET last_fire_at = $2, next_fire_at = $3, skipped_fires = skipped_fires + $4, updated_at = now()
WHERE name = $1 AND NOT paused AND $2::timestamptz <= now() AND $2::timestamptz > fires_after
  AND (last_fire_at IS NULL OR last_fire_at < $2::timestamptz)
RETURNING last_run_id`;

/**
 * Counts one skipped fire time on schedule $1 — only while its last run is still `running` when
 * $2 is true (overlap 'skip'; a statement of its own, so that it sees a run committed while the
 * gate waited for the row). Returns a row when it counted. The last run's state is read by its
 * primary key (a scalar subquery): an `EXISTS` under the `OR` was planned, on tables empty at
 * planning time, as a hashed subplan of every running run (438 ms at 200,000 on each fire).
 */
export const countSkippedSql = (s: string) => `
UPDATE ${s}.cyclone_schedules t
SET skipped_fires = t.skipped_fires + 1, updated_at = now()
WHERE t.name = $1
  AND (NOT $2::boolean
       OR (SELECT r.state FROM ${s}.cyclone_runs r WHERE r.id = t.last_run_id) = 'running')
RETURNING t.name`;

/** Records run $2 as schedule $1's latest. */
export const recordRunSql = (s: string) =>
  `UPDATE ${s}.cyclone_schedules SET last_run_id = $2, updated_at = now() WHERE name = $1`;

/**
 * Takes schedule $1's waiting trigger, if any: clears it and returns its time, also as ISO-8601
 * UTC text with microseconds (the trigger run's key). A concurrent take waits for the row and
 * then finds it cleared.
 */
export const takeTriggerSql = (s: string) => `
WITH req AS (
  SELECT name, trigger_requested_at FROM ${s}.cyclone_schedules
  WHERE name = $1 AND trigger_requested_at IS NOT NULL
  FOR UPDATE
)
UPDATE ${s}.cyclone_schedules t
SET trigger_requested_at = NULL, updated_at = now()
FROM req WHERE t.name = req.name
RETURNING req.trigger_requested_at AS requested_at,
  to_char(req.trigger_requested_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
    AS requested_iso`;

/**
 * Every schedule, by name, with whether a worker carries it: seen within the last $1 ms.
 */
export const listSchedulesSql = (s: string) => `
SELECT name, cron, timezone, workflow, paused, last_fire_at, next_fire_at, last_run_id,
       skipped_fires, trigger_requested_at, last_seen_at, created_at, updated_at,
       last_seen_at > now() - make_interval(secs => $1::double precision / 1000) AS carried
FROM ${s}.cyclone_schedules
ORDER BY name`;

/** Pauses schedule $1 (idempotent). Returns its name when it exists. */
export const pauseScheduleSql = (s: string) => `
UPDATE ${s}.cyclone_schedules
SET paused = true, updated_at = CASE WHEN paused THEN updated_at ELSE now() END
WHERE name = $1
RETURNING name`;

/**
 * Resumes schedule $1 (idempotent): a paused one fires again from now on, never the fire times
 * that passed while it was paused. Returns its name when it exists.
 */
export const resumeScheduleSql = (s: string) => `
UPDATE ${s}.cyclone_schedules
SET paused = false,
    fires_after = CASE WHEN paused THEN now() ELSE fires_after END,
    updated_at = CASE WHEN paused THEN now() ELSE updated_at END
WHERE name = $1
RETURNING name`;

/**
 * Asks for one run of schedule $1 now (a waiting request is kept: requests before a worker takes
 * it make one run), and wakes the workers on channel $2 with payload $3. Returns the request's
 * time and whether a worker carries the schedule (seen within the last $4 ms).
 */
export const triggerScheduleSql = (s: string) => `
UPDATE ${s}.cyclone_schedules
SET trigger_requested_at = coalesce(trigger_requested_at, now()), updated_at = now()
WHERE name = $1
RETURNING trigger_requested_at AS requested_at,
  last_seen_at > now() - make_interval(secs => $4::double precision / 1000) AS carried,
  pg_notify($2, $3) AS notified`;

// biome-ignore lint/suspicious/noExplicitAny: rows from pg are untyped; schedules.ts maps them
type Row = any;

/** A schedule's row as a worker reads it before firing. */
export interface LoadedSchedule {
  db_now: Date;
  name: string;
  found: boolean;
  paused: boolean | null;
  fires_after: Date | null;
  last_fire_at: Date | null;
  trigger_pending: boolean | null;
}

const upsertStatement = defineStatement('upsert_schedules', upsertSchedulesSql);
const loadStatement = defineStatement('load_schedules', loadSchedulesSql);
const advanceStatement = defineStatement('advance_schedule', advanceScheduleSql);
const countSkippedStatement = defineStatement('count_skipped_fire', countSkippedSql);
const recordRunStatement = defineStatement('record_schedule_run', recordRunSql);
const takeTriggerStatement = defineStatement('take_schedule_trigger', takeTriggerSql);
const listStatement = defineStatement('list_schedules', listSchedulesSql, false);
const pauseStatement = defineStatement('pause_schedule', pauseScheduleSql, false);
const resumeStatement = defineStatement('resume_schedule', resumeScheduleSql, false);
const triggerStatement = defineStatement('trigger_schedule', triggerScheduleSql, false);

/**
 * Upserts the carried definitions (sorted by name) and marks them seen.
 * @returns the names with a trigger waiting.
 */
export async function upsertSchedules(
  on: Queryable,
  db: SqlScope,
  rows: readonly {
    name: string;
    cron: string;
    timezone: string;
    workflow: string;
    nextFireAt: Date | null;
  }[],
): Promise<string[]> {
  const sorted = [...rows].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  const { rows: out } = await send<{ name: string; trigger_pending: boolean }>(
    on,
    upsertStatement(db),
    [
      sorted.map((r) => r.name),
      sorted.map((r) => r.cron),
      sorted.map((r) => r.timezone),
      sorted.map((r) => r.workflow),
      sorted.map((r) => r.nextFireAt),
    ],
  );
  return out.filter((r) => r.trigger_pending).map((r) => r.name);
}

/** The named schedules' rows and PostgreSQL's clock (`db_now` on every row). */
export async function loadSchedules(
  on: Queryable,
  db: SqlScope,
  names: readonly string[],
): Promise<LoadedSchedule[]> {
  const { rows } = await send<LoadedSchedule>(on, loadStatement(db), [names]);
  return rows;
}

/**
 * The fire-time gate (in the firing transaction).
 * @returns `{ lastRunId }` when this call moved `last_fire_at` to `fireAt`, undefined otherwise.
 */
export async function advanceSchedule(
  on: Queryable,
  db: SqlScope,
  p: { name: string; fireAt: Date; nextFireAt: Date | null; passedOver: number },
): Promise<{ lastRunId: string | null } | undefined> {
  const { rows } = await send<{ last_run_id: string | null }>(on, advanceStatement(db), [
    p.name,
    p.fireAt,
    p.nextFireAt,
    p.passedOver,
  ]);
  const row = rows[0];
  return row ? { lastRunId: row.last_run_id } : undefined;
}

/**
 * Counts one skipped fire time; with `onlyIfRunning`, only while the last run is `running`.
 * @returns true when it counted.
 */
export async function countSkipped(
  on: Queryable,
  db: SqlScope,
  p: { name: string; onlyIfRunning: boolean },
): Promise<boolean> {
  const { rows } = await send(on, countSkippedStatement(db), [p.name, p.onlyIfRunning]);
  return rows.length > 0;
}

/** Records the schedule's latest run. */
export async function recordRun(
  on: Queryable,
  db: SqlScope,
  p: { name: string; runId: string },
): Promise<void> {
  await send(on, recordRunStatement(db), [p.name, p.runId]);
}

/** Takes the schedule's waiting trigger: its time, or undefined when there was none. */
export async function takeTrigger(
  on: Queryable,
  db: SqlScope,
  name: string,
): Promise<{ requestedAt: Date; requestedIso: string } | undefined> {
  const { rows } = await send<{ requested_at: Date; requested_iso: string }>(
    on,
    takeTriggerStatement(db),
    [name],
  );
  const row = rows[0];
  return row ? { requestedAt: row.requested_at, requestedIso: row.requested_iso } : undefined;
}

/** Every schedule's row, with `carried` (seen within `carriedWithinMs`). */
export async function listSchedules(
  on: Queryable,
  db: SqlScope,
  carriedWithinMs: number,
): Promise<Row[]> {
  const { rows } = await send<Row>(on, listStatement(db), [carriedWithinMs]);
  return rows;
}

/** Pauses the schedule. @returns false when there is no such schedule. */
export async function pauseSchedule(on: Queryable, db: SqlScope, name: string): Promise<boolean> {
  const { rows } = await send(on, pauseStatement(db), [name]);
  return rows.length > 0;
}

/** Resumes the schedule. @returns false when there is no such schedule. */
export async function resumeSchedule(on: Queryable, db: SqlScope, name: string): Promise<boolean> {
  const { rows } = await send(on, resumeStatement(db), [name]);
  return rows.length > 0;
}

/**
 * Asks for one run of the schedule now and NOTIFYs `payload`.
 * @returns the request's time and `carried`, or undefined when there is no such schedule.
 */
export async function triggerSchedule(
  on: Queryable,
  db: SqlScope,
  p: { name: string; payload: string; carriedWithinMs: number },
): Promise<{ requestedAt: Date; carried: boolean } | undefined> {
  const { rows } = await send<{ requested_at: Date; carried: boolean }>(on, triggerStatement(db), [
    p.name,
    db.channel,
    p.payload,
    p.carriedWithinMs,
  ]);
  const row = rows[0];
  return row ? { requestedAt: row.requested_at, carried: row.carried } : undefined;
}
