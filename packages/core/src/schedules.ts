/**
 * The operator's side of cron schedules (`Client.listSchedules`, `pauseSchedule`,
 * `resumeSchedule`, `triggerSchedule`). Each is one statement on the schedule's row, so it
 * survives restarts; the workers carrying the schedule act on it (the client cannot fire a
 * schedule itself: the run's input comes from the schedule's `input` function, in the workers).
 */
import type { Db } from './db.js';
import { ScheduleNotFoundError } from './errors.js';
import { isStorableText } from './json.js';
import * as schedulesSql from './sql/schedules.js';

/**
 * A schedule not seen by any worker for this long (ms) is listed `carried: false`: no running
 * worker has its definition, so it does not fire. Workers refresh what they carry every
 * `touchIntervalMs` (10 s by default), well inside it.
 */
export const UNCARRIED_AFTER_MS = 60_000;

/** The NOTIFY payload that wakes the workers carrying schedule `name`. */
export function scheduleNotice(name: string): string {
  return `schedule:${name}`;
}

/** A cron schedule as `Client.listSchedules` returns it. Times are PostgreSQL's. */
export interface ScheduleInfo {
  name: string;
  cron: string;
  timezone: string;
  workflow: string;
  paused: boolean;
  /**
   * A worker carrying the schedule was seen within the last minute (`UNCARRIED_AFTER_MS`). An
   * uncarried schedule does not fire: no running worker has its definition.
   */
  carried: boolean;
  /** The latest fire time dealt with (fired, or passed over by catch-up or overlap); null if none yet. */
  lastFireAt: Date | null;
  /** The next fire time; null while paused or uncarried. */
  nextFireAt: Date | null;
  /** The run of the latest fire or trigger that made one. */
  lastRunId: string | null;
  /** Fire times that made no run: passed over after downtime, skipped by overlap, or whose input failed. */
  skippedFires: number;
  /** When a trigger waiting for a worker was asked for; null when none waits. */
  triggerRequestedAt: Date | null;
  /** When a worker carrying the schedule last refreshed it. */
  lastSeenAt: Date;
  createdAt: Date;
}

/** Result of `Client.triggerSchedule`. */
export interface TriggerScheduleResult {
  /** The request's time: the `fireAt` the schedule's `input` gets. */
  requestedAt: Date;
  /** A worker carries the schedule now; if none does, the run is made once one does. */
  carried: boolean;
}

/** `Client.listSchedules`: every schedule, by name. */
export async function listSchedules(db: Db): Promise<ScheduleInfo[]> {
  const rows = await schedulesSql.listSchedules(db.pool, db, UNCARRIED_AFTER_MS);
  return rows.map((r) => ({
    name: r.name,
    cron: r.cron,
    timezone: r.timezone,
    workflow: r.workflow,
    paused: r.paused,
    carried: r.carried,
    lastFireAt: r.last_fire_at,
    nextFireAt: r.paused || !r.carried ? null : r.next_fire_at,
    lastRunId: r.last_run_id,
    skippedFires: Number(r.skipped_fires),
    triggerRequestedAt: r.trigger_requested_at,
    lastSeenAt: r.last_seen_at,
    createdAt: r.created_at,
  }));
}

/** `Client.pauseSchedule`. */
export async function pauseSchedule(db: Db, name: string): Promise<void> {
  checkName(name);
  if (!(await schedulesSql.pauseSchedule(db.pool, db, name))) throw new ScheduleNotFoundError(name);
}

/** `Client.resumeSchedule`. */
export async function resumeSchedule(db: Db, name: string): Promise<void> {
  checkName(name);
  if (!(await schedulesSql.resumeSchedule(db.pool, db, name))) {
    throw new ScheduleNotFoundError(name);
  }
}

/** `Client.triggerSchedule`. */
export async function triggerSchedule(db: Db, name: string): Promise<TriggerScheduleResult> {
  checkName(name);
  const row = await schedulesSql.triggerSchedule(db.pool, db, {
    name,
    payload: scheduleNotice(name),
    carriedWithinMs: UNCARRIED_AFTER_MS,
  });
  if (!row) throw new ScheduleNotFoundError(name);
  return row;
}

/** No schedule has a name PostgreSQL cannot store (NUL, lone surrogates), or a non-string one. */
function checkName(name: unknown): asserts name is string {
  if (typeof name !== 'string' || !isStorableText(name)) {
    throw new ScheduleNotFoundError(String(name));
  }
}
