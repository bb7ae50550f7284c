/**
 * Cron schedule definitions (`newSchedule`): a name, a cron expression in an IANA time zone, the
 * workflow each fire time runs and the input it gets, and what to do after downtime (catch-up)
 * and while the previous run is still running (overlap). Validated when defined; nothing here
 * touches the database (the workers that carry a schedule fire it: `scheduler.ts`).
 */
import { compileCron } from './cron.js';
import type { Workflow } from './definitions.js';
import { ConfigError } from './errors.js';

/**
 * Which fire times missed while no worker ran (downtime) still fire: `'none'` (none: only fire
 * times reached on time fire), `'latest'` (the most recent missed one), `{ max: n }` (the `n`
 * most recent, oldest first; 1 ≤ n ≤ `MAX_CATCH_UP`).
 */
export type CatchUp = 'none' | 'latest' | { readonly max: number };

/**
 * Whether a fire time fires while the schedule's previous run (fire or trigger) is still
 * `running`: `'allow'` (yes), `'skip'` (no: the fire time is passed over and counted).
 */
export type Overlap = 'allow' | 'skip';

/** The largest `catchUp: { max }`. */
export const MAX_CATCH_UP = 1000;

/** Options of `newSchedule`. */
export interface ScheduleOptions<RI> {
  /** 5 fields (minute hour day-of-month month day-of-week), or 6 with seconds first. */
  cron: string;
  /** IANA time zone name the cron's wall-clock times are read in. Default `'UTC'`. */
  timezone?: string;
  /** The workflow each fire time runs; the workers carrying the schedule must carry it too. */
  workflow: Workflow<RI>;
  /**
   * The run's input for a fire time (an exact instant; for a trigger, the time it was asked
   * for). Called by the worker that fires it; it should depend on `fireAt` only.
   */
  input: (fireAt: Date) => NoInfer<RI>;
  /** After downtime. Default `'latest'`. */
  catchUp?: CatchUp;
  /** While the previous run is running. Default `'allow'`. */
  overlap?: Overlap;
}

/** A cron schedule: made by `newSchedule`, carried by workers (`new Worker({ schedules })`). */
export interface Schedule<RI = unknown> {
  readonly kind: 'schedule';
  readonly name: string;
  readonly cron: string;
  readonly timezone: string;
  readonly workflow: Workflow<RI>;
  readonly input: (fireAt: Date) => RI;
  readonly catchUp: CatchUp;
  readonly overlap: Overlap;
}

/** Schedule names: a letter or `_`, then letters, digits, `_` or `-`; at most 63 characters. */
const NAME = /^[A-Za-z_][A-Za-z0-9_-]{0,62}$/;

/**
 * Defines a cron schedule. Any number of workers may carry it: each fire time makes exactly one
 * run, whose submit key is `schedule:<name>:<fire time, ISO-8601 UTC>`.
 * @throws ConfigError (naming the schedule) on a name that is not a plain identifier, an invalid
 *   cron expression (or one that never fires), an unknown time zone, a workflow not made by
 *   `newWorkflow`, an input that is not a function, or a bad `catchUp` or `overlap`.
 */
export function newSchedule<RI>(name: string, options: ScheduleOptions<RI>): Schedule<RI> {
  if (typeof name !== 'string' || !NAME.test(name)) {
    throw new ConfigError(
      `schedule name ${JSON.stringify(name)} is not a plain identifier (a letter or _, then letters, digits, _ or -, at most 63 characters)`,
    );
  }
  const bad = (message: string) => new ConfigError(`schedule '${name}': ${message}`);
  if (!options || typeof options !== 'object') throw bad('options must be an object');
  const timezone = options.timezone ?? 'UTC';
  try {
    compileCron(options.cron, timezone);
  } catch (err) {
    throw bad((err as Error).message);
  }
  const wf = options.workflow as Partial<Workflow<RI>> | undefined;
  if (wf?.kind !== 'workflow' || typeof wf.name !== 'string') {
    throw bad('workflow must be a workflow made by newWorkflow');
  }
  if (typeof options.input !== 'function') {
    throw bad('input must be a function (fireAt: Date) => the run input');
  }
  const catchUp = options.catchUp ?? 'latest';
  if (
    catchUp !== 'none' &&
    catchUp !== 'latest' &&
    !(
      typeof catchUp === 'object' &&
      catchUp !== null &&
      Number.isInteger(catchUp.max) &&
      catchUp.max >= 1 &&
      catchUp.max <= MAX_CATCH_UP
    )
  ) {
    throw bad(
      `catchUp must be 'none', 'latest' or { max: n } with an integer n from 1 to ${MAX_CATCH_UP}, got ${JSON.stringify(catchUp)}`,
    );
  }
  const overlap = options.overlap ?? 'allow';
  if (overlap !== 'allow' && overlap !== 'skip') {
    throw bad(`overlap must be 'allow' or 'skip', got ${JSON.stringify(overlap)}`);
  }
  return Object.freeze({
    kind: 'schedule' as const,
    name,
    cron: options.cron,
    timezone,
    workflow: options.workflow,
    input: options.input as (fireAt: Date) => RI,
    catchUp: typeof catchUp === 'object' ? Object.freeze({ max: catchUp.max }) : catchUp,
    overlap,
  });
}

/** The submit key of a fire time's run: `schedule:<name>:<fire time, ISO-8601 UTC>`. */
export function fireKey(name: string, fireAt: Date): string {
  return `schedule:${name}:${fireAt.toISOString()}`;
}

/** The submit key of a trigger's run: `schedule:<name>:trigger:<request time, µs, UTC>`. */
export function triggerKey(name: string, requestedIso: string): string {
  return `schedule:${name}:trigger:${requestedIso}`;
}
