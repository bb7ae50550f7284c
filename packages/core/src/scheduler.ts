/**
 * The scheduler: fires the cron schedules a worker carries. Every worker carrying a schedule
 * runs it, with no leader; a fire time makes exactly one run because a worker fires it only when
 * its UPDATE moves the schedule's `last_fire_at` forward to it, and submits the run (submit key
 * `schedule:<name>:<fire time>`) in that same transaction; a worker racing it waits for the row
 * and then finds the time taken. Time is PostgreSQL's clock: each pass reads `now()` with the
 * schedules' rows, and the gate checks the fire time against `now()` again. Between passes the
 * service sleeps until the next fire time (woken early by a trigger's NOTIFY), so a fire time
 * fires within tens of milliseconds.
 */
import type pg from 'pg';
import type { Client } from './client.js';
import { type CronTimes, compileCron } from './cron.js';
import { isConnectionError, MAX_TIMER_MS, settlesWithin, withTransaction } from './db.js';
import { ConfigError, InputValidationError, SubmitKeyConflictError } from './errors.js';
import type { Logger } from './logger.js';
import { every, type Periodic } from './periodic.js';
import { fireKey, type Schedule, triggerKey } from './schedule.js';
import { scheduleNotice, UNCARRIED_AFTER_MS } from './schedules.js';
import * as schedulesSql from './sql/schedules.js';
import type { SqlScope } from './sql/statement.js';

/** At most this many fire times within `lateAfterMs` of now fire in one tick (a cron of one a second gives 10). */
const MAX_RECENT_FIRES = 60;
/** Configuration of the scheduler. Durations in ms. */
export interface SchedulerConfig {
  /**
   * Between refreshes of the carried definitions (`last_seen_at`; also how soon a trigger is seen
   * without LISTEN), ± 20 %. Default 10,000; at most a third of `UNCARRIED_AFTER_MS` (60,000).
   */
  touchIntervalMs?: number;
  /**
   * With `catchUp: 'none'`, a fire time reached more than this late counts as missed (downtime)
   * and makes no run. Default 10,000.
   */
  lateAfterMs?: number;
  /** Longest sleep between passes (the clock offset to PostgreSQL is measured again). Default 60,000. */
  maxSleepMs?: number;
  /** Before the next pass after a failed one (say, the database is unreachable). Default 1,000. */
  retryDelayMs?: number;
}

/** What the scheduler needs of its worker. */
export interface SchedulerParts {
  /** The control pool; never held by handlers. */
  pool: pg.Pool;
  db: SqlScope;
  log: Logger;
  /** Submits each run inside the firing transaction (`submitOnce` with `{ tx }`). */
  client: Pick<Client, 'submitOnce'>;
  // biome-ignore lint/suspicious/noExplicitAny: schedules of any input type
  schedules: readonly Schedule<any>[];
  /** True for a workflow the worker carries; each schedule's workflow must be one. */
  carries?(workflow: string): boolean;
}

/** What one pass did (fire times of the carried schedules). */
export interface SchedulerResult {
  /** Fire times that made a run. */
  fired: number;
  /** Operator triggers that made a run. */
  triggered: number;
  /** Fire times skipped by `overlap: 'skip'` (the previous run was still running). */
  skipped: number;
  /** Fire times passed over by the catch-up policy after downtime. */
  missed: number;
  /** Fire times and triggers whose run could not be made (the input function threw or failed). */
  failed: number;
  /** The earliest next fire time of the carried schedules (PostgreSQL's clock). */
  nextFireAt: Date | null;
}

/** Counters since the scheduler was made. */
export type SchedulerStats = Omit<SchedulerResult, 'nextFireAt'>;

interface Entry {
  // biome-ignore lint/suspicious/noExplicitAny: see SchedulerParts.schedules
  schedule: Schedule<any>;
  times: CronTimes;
}

type Outcome = 'fired' | 'skipped' | 'failed' | 'lost';

/** The cron scheduler, as a service: `start()`, `stop()`, `runOnce()`. */
export class Scheduler {
  readonly touchIntervalMs: number;
  readonly lateAfterMs: number;
  readonly maxSleepMs: number;
  readonly retryDelayMs: number;
  readonly stats: SchedulerStats = { fired: 0, triggered: 0, skipped: 0, missed: 0, failed: 0 };
  private readonly entries = new Map<string, Entry>();
  /** PostgreSQL's clock minus this process's, as last measured. */
  private offsetMs = 0;
  private state: 'new' | 'running' | 'stopped' = 'new';
  private touchTask: Periodic | undefined;
  private loopDone: Promise<void> | undefined;
  private woken = false;
  private interruptSleep: (() => void) | undefined;

  /**
   * @throws ConfigError on a bad interval, an item not made by `newSchedule`, two schedules with
   *   one name, or a schedule whose workflow the worker does not carry.
   */
  constructor(
    private readonly parts: SchedulerParts,
    config: SchedulerConfig = {},
  ) {
    const duration = (name: string, v: number | undefined, def: number, max = MAX_TIMER_MS) => {
      const x = v ?? def;
      if (!(Number.isFinite(x) && x > 0 && x <= max)) {
        throw new ConfigError(
          `scheduler ${name} must be a positive number of at most ${max}, got ${v}`,
        );
      }
      return x;
    };
    this.touchIntervalMs = duration(
      'touchIntervalMs',
      config.touchIntervalMs,
      10_000,
      UNCARRIED_AFTER_MS / 3,
    );
    this.lateAfterMs = duration('lateAfterMs', config.lateAfterMs, 10_000);
    this.maxSleepMs = duration('maxSleepMs', config.maxSleepMs, 60_000);
    this.retryDelayMs = duration('retryDelayMs', config.retryDelayMs, 1_000);
    if (!Array.isArray(parts.schedules)) {
      throw new ConfigError('schedules must be an array of schedules made by newSchedule');
    }
    for (const s of parts.schedules) {
      if (s?.kind !== 'schedule' || typeof s.name !== 'string') {
        throw new ConfigError('schedules must be made by newSchedule');
      }
      if (this.entries.has(s.name)) throw new ConfigError(`schedule '${s.name}' is given twice`);
      if (parts.carries && !parts.carries(s.workflow.name)) {
        throw new ConfigError(
          `schedule '${s.name}' runs workflow '${s.workflow.name}', which this worker does not carry: add it to workflows`,
        );
      }
      this.entries.set(s.name, { schedule: s, times: compileCron(s.cron, s.timezone) });
    }
  }

  /** True for a NOTIFY payload about one of the carried schedules (a trigger). */
  wants(payload: string): boolean {
    const prefix = scheduleNotice('');
    return payload.startsWith(prefix) && this.entries.has(payload.slice(prefix.length));
  }

  /**
   * Registers the carried definitions (a failure is logged; the passes try again), then fires
   * them until `stop()`.
   */
  async start(): Promise<void> {
    if (this.state !== 'new') return;
    this.state = 'running';
    await this.refresh();
    this.touchTask = every(this.touchIntervalMs, 0.2, () => this.refresh(), this.parts.log);
    this.loopDone = this.loop();
  }

  /** Fires nothing more; waits up to `timeoutMs` (default 5,000) for a pass in progress. */
  async stop(timeoutMs = 5_000): Promise<void> {
    if (this.state === 'stopped') return;
    this.state = 'stopped';
    this.touchTask?.stop();
    this.interruptSleep?.();
    await settlesWithin(this.loopDone, timeoutMs);
  }

  /** Runs a pass now (a trigger arrived). */
  wake(): void {
    this.woken = true;
    this.interruptSleep?.();
  }

  /**
   * One pass: reads the carried schedules' rows and PostgreSQL's clock; fires each waiting
   * trigger, then each schedule's due fire times (as its catch-up and overlap policies say).
   * @throws the first statement error (after trying every schedule).
   */
  async runOnce(): Promise<SchedulerResult> {
    const result: SchedulerResult = {
      fired: 0,
      triggered: 0,
      skipped: 0,
      missed: 0,
      failed: 0,
      nextFireAt: null,
    };
    const { pool, db } = this.parts;
    const t0 = Date.now();
    const rows = await schedulesSql.loadSchedules(pool, db, [...this.entries.keys()]);
    const t1 = Date.now();
    const dbNow = rows[0]?.db_now;
    if (!dbNow) return result;
    this.offsetMs = dbNow.getTime() - (t0 + t1) / 2;
    if (rows.some((r) => !r.found)) await this.touch();
    let error: unknown;
    for (const row of rows) {
      const entry = this.entries.get(row.name);
      if (!entry || !row.found) continue;
      try {
        if (row.trigger_pending) await this.fireTrigger(entry, result);
        if (!row.paused) await this.fireDue(entry, row, dbNow, result);
      } catch (err) {
        error ??= err;
      }
    }
    for (const { times } of this.entries.values()) {
      const next = times.next(dbNow);
      if (next && (result.nextFireAt === null || next < result.nextFireAt))
        result.nextFireAt = next;
    }
    for (const k of ['fired', 'triggered', 'skipped', 'missed', 'failed'] as const) {
      this.stats[k] += result[k];
    }
    if (error !== undefined) throw error;
    return result;
  }

  /** The due fire times of one schedule, chosen by its catch-up policy, fired oldest first. */
  private async fireDue(
    entry: Entry,
    row: schedulesSql.LoadedSchedule,
    dbNow: Date,
    result: SchedulerResult,
  ): Promise<void> {
    const { schedule: s, times } = entry;
    const firesAfter = row.fires_after as Date;
    const cursor =
      row.last_fire_at && row.last_fire_at > firesAfter ? row.last_fire_at : firesAfter;
    // Fire times reached at most lateAfterMs late are not downtime (a slow tick on a busy
    // machine): each fires, whatever the catch-up policy says of missed ones.
    const recentFrom = new Date(Math.max(cursor.getTime(), dbNow.getTime() - this.lateAfterMs));
    const recent = times.due(recentFrom, dbNow, MAX_RECENT_FIRES).fireTimes.length;
    const limit = Math.max(typeof s.catchUp === 'object' ? s.catchUp.max : 1, recent);
    const { fireTimes, passedOver } = times.due(cursor, dbNow, limit);
    const latest = fireTimes[fireTimes.length - 1];
    if (!latest) return;
    if (s.catchUp === 'none' && dbNow.getTime() - latest.getTime() > this.lateAfterMs) {
      // Reached too late: downtime. Pass every due fire time over without a run.
      const won = await schedulesSql.advanceSchedule(this.parts.pool, this.parts.db, {
        name: s.name,
        fireAt: latest,
        nextFireAt: times.next(dbNow),
        passedOver: passedOver + 1,
      });
      if (won) this.passedOver(s, passedOver + 1, latest, result);
      return;
    }
    for (let i = 0; i < fireTimes.length; i++) {
      const fireAt = fireTimes[i] as Date;
      const missed = i === 0 ? passedOver : 0;
      const outcome = await this.fire(entry, fireAt, missed, dbNow);
      if (outcome === 'lost') continue;
      if (missed > 0) this.passedOver(s, missed, fireAt, result);
      if (outcome === 'fired') result.fired++;
      else if (outcome === 'skipped') result.skipped++;
      else result.failed++;
    }
  }

  private passedOver(
    // biome-ignore lint/suspicious/noExplicitAny: see SchedulerParts.schedules
    s: Schedule<any>,
    n: number,
    upTo: Date,
    result: SchedulerResult,
  ): void {
    result.missed += n;
    this.parts.log.info(
      { schedule: s.name, missed: n, upTo: upTo.toISOString(), catchUp: s.catchUp },
      'schedule: fire times missed while no worker ran were passed over (catch-up policy)',
    );
  }

  /**
   * Fires one fire time in one transaction: the gate (`last_fire_at` moved forward, or another
   * worker has it: 'lost'), the overlap check, the run, the schedule's latest run.
   */
  private async fire(
    entry: Entry,
    fireAt: Date,
    passedOver: number,
    dbNow: Date,
  ): Promise<Outcome> {
    const { schedule: s, times } = entry;
    const { pool, db, log } = this.parts;
    let input: unknown;
    let inputError: unknown;
    try {
      input = s.input(new Date(fireAt));
    } catch (err) {
      inputError = err;
    }
    const nextFireAt = times.next(dbNow > fireAt ? dbNow : fireAt);
    return withTransaction(pool, async (c) => {
      const won = await schedulesSql.advanceSchedule(c, db, {
        name: s.name,
        fireAt,
        nextFireAt,
        passedOver,
      });
      if (!won) return 'lost';
      if (inputError !== undefined) {
        await schedulesSql.countSkipped(c, db, { name: s.name, onlyIfRunning: false });
        log.error(
          { schedule: s.name, fireAt: fireAt.toISOString(), err: String(inputError) },
          'schedule: the input function threw; this fire time makes no run',
        );
        return 'failed';
      }
      if (
        s.overlap === 'skip' &&
        won.lastRunId !== null &&
        (await schedulesSql.countSkipped(c, db, { name: s.name, onlyIfRunning: true }))
      ) {
        log.info(
          { schedule: s.name, fireAt: fireAt.toISOString(), runId: won.lastRunId },
          "schedule: fire time skipped, the previous run is still running (overlap 'skip')",
        );
        return 'skipped';
      }
      const runId = await this.submit(c, s, fireKey(s.name, fireAt), input, fireAt);
      if (runId === undefined) {
        await schedulesSql.countSkipped(c, db, { name: s.name, onlyIfRunning: false });
        return 'failed';
      }
      await schedulesSql.recordRun(c, db, { name: s.name, runId });
      log.debug({ schedule: s.name, fireAt: fireAt.toISOString(), runId }, 'schedule fired');
      return 'fired';
    });
  }

  /** Takes the schedule's waiting trigger, if another worker has not, and makes its run. */
  private async fireTrigger(entry: Entry, result: SchedulerResult): Promise<void> {
    const { schedule: s } = entry;
    const { pool, db, log } = this.parts;
    const outcome = await withTransaction(pool, async (c): Promise<Outcome> => {
      const req = await schedulesSql.takeTrigger(c, db, s.name);
      if (!req) return 'lost';
      let input: unknown;
      try {
        input = s.input(new Date(req.requestedAt));
      } catch (err) {
        log.error(
          { schedule: s.name, requestedAt: req.requestedIso, err: String(err) },
          'schedule: the input function threw; the trigger makes no run',
        );
        return 'failed';
      }
      const key = triggerKey(s.name, req.requestedIso);
      const runId = await this.submit(c, s, key, input, req.requestedAt);
      if (runId === undefined) return 'failed';
      await schedulesSql.recordRun(c, db, { name: s.name, runId });
      log.info({ schedule: s.name, requestedAt: req.requestedIso, runId }, 'schedule triggered');
      return 'fired';
    });
    if (outcome === 'fired') result.triggered++;
    else if (outcome === 'failed') result.failed++;
  }

  /**
   * The run of a fire time or trigger, submitted in the firing transaction `c`.
   * @returns its id, or undefined when the input fails the workflow (logged; no run).
   */
  private async submit(
    c: pg.PoolClient,
    // biome-ignore lint/suspicious/noExplicitAny: see SchedulerParts.schedules
    s: Schedule<any>,
    key: string,
    input: unknown,
    fireAt: Date,
  ): Promise<string | undefined> {
    try {
      const { runId } = await this.parts.client.submitOnce(s.workflow, key, input, { tx: c });
      return runId;
    } catch (err) {
      if (!InputValidationError.isInstance(err) && !SubmitKeyConflictError.isInstance(err)) {
        throw err;
      }
      this.parts.log.error(
        { schedule: s.name, fireAt: fireAt.toISOString(), err: String(err) },
        'schedule: the run input was refused; this fire time makes no run',
      );
      return undefined;
    }
  }

  /** Upserts the carried definitions and marks them seen. @returns names with a trigger waiting. */
  private touch(): Promise<string[]> {
    const now = new Date(Date.now() + this.offsetMs);
    return schedulesSql.upsertSchedules(
      this.parts.pool,
      this.parts.db,
      [...this.entries.values()].map(({ schedule: s, times }) => ({
        name: s.name,
        cron: s.cron,
        timezone: s.timezone,
        workflow: s.workflow.name,
        nextFireAt: times.next(now),
      })),
    );
  }

  /** `touch`, logging a failure; a waiting trigger wakes the loop (LISTEN may be off). */
  private async refresh(): Promise<void> {
    try {
      if ((await this.touch()).length > 0) this.wake();
    } catch (err) {
      this.parts.log.warn(
        { err: String(err), connection: isConnectionError(err) },
        'schedule refresh failed; will retry',
      );
    }
  }

  private async loop(): Promise<void> {
    while (this.state === 'running') {
      this.woken = false;
      let delay: number;
      try {
        const { nextFireAt } = await this.runOnce();
        // A couple of ms late rather than early: an early pass finds nothing and sleeps again.
        delay = nextFireAt
          ? nextFireAt.getTime() - (Date.now() + this.offsetMs) + 2
          : this.maxSleepMs;
      } catch (err) {
        this.parts.log.warn(
          { err: String(err), connection: isConnectionError(err) },
          'schedule pass failed; will retry',
        );
        delay = this.retryDelayMs;
      }
      if (this.state !== 'running') break;
      if (this.woken) continue;
      await this.sleep(Math.min(Math.max(delay, 0), this.maxSleepMs));
    }
  }

  /** Resolves after `ms`, or at once on `wake()` or `stop()`. */
  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.interruptSleep = undefined;
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.interruptSleep = done;
    });
  }
}
