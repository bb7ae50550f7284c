/**
 * Fire times of a cron expression in an IANA time zone: the one module that imports the cron
 * library (croner, zero dependencies, Vixie-cron DST rules). Pure computation on instants; the
 * scheduler feeds it PostgreSQL's clock.
 *
 * DST, as Vixie cron (and croner) do it: a fixed-time expression (no wildcard or step in its
 * seconds, minutes and hours, e.g. `30 2 * * *` or `0 30 2,14 * * *`) fires once on the day a
 * clock change skips its time (at the first valid time after the gap: 03:00 for 02:30 in Paris on
 * the spring-forward day) and once, at the first occurrence, when its time occurs twice. Any
 * other expression (`0 * * * *`, a step of minutes) fires at the times that exist: the skipped
 * hour has no fire time, the repeated hour fires on both passes.
 */
import { Cron } from 'croner';

/** Most fire times counted when reporting how many a catch-up passed over. */
export const MAX_COUNTED_FIRE_TIMES = 1000;

/** The fire times of one cron expression in one time zone. */
export interface CronTimes {
  readonly expression: string;
  readonly timezone: string;
  /** The first fire time strictly after `after`, or null when there is none. */
  next(after: Date): Date | null;
  /**
   * The fire times in `(after, upTo]`: the `limit` most recent, oldest first, and how many
   * earlier ones the range also holds (`passedOver`, counted up to `MAX_COUNTED_FIRE_TIMES`).
   */
  due(after: Date, upTo: Date, limit: number): { fireTimes: Date[]; passedOver: number };
}

/**
 * Why `timezone` is not a time zone name that `Intl` (and so croner) knows, or undefined when it
 * is one. Offsets (`+01:00`) and made-up names are refused.
 */
export function timezoneProblem(timezone: unknown): string | undefined {
  if (typeof timezone !== 'string' || timezone.length === 0 || timezone.length > 64) {
    return `timezone must be an IANA time zone name such as 'Europe/Paris' or 'UTC', got ${JSON.stringify(timezone)}`;
  }
  try {
    new Intl.DateTimeFormat('en-US', { timeZone: timezone });
    return undefined;
  } catch {
    return `unknown time zone ${JSON.stringify(timezone)} (an IANA name such as 'Europe/Paris' or 'UTC')`;
  }
}

/** The nicknames croner expands (`@reboot`, which it names too, never fires in a worker). */
const NICKNAMES = new Set([
  '@yearly',
  '@annually',
  '@monthly',
  '@weekly',
  '@daily',
  '@midnight',
  '@hourly',
]);

/**
 * Why `expression` (a non-empty string) does not have the shape Cyclone accepts: 5 or 6 fields,
 * or one nickname; undefined when it has. The fields themselves are croner's to check.
 */
function cronFieldProblem(expression: string): string | undefined {
  const fields = expression.trim().split(/\s+/);
  const first = fields[0] ?? '';
  if (first.startsWith('@')) {
    if (fields.length === 1 && NICKNAMES.has(first.toLowerCase())) return undefined;
    return `${fields.length === 1 ? `unknown nickname ${JSON.stringify(first)}` : 'a nickname stands alone'} (accepted: @yearly, @monthly, @weekly, @daily, @hourly)`;
  }
  if (fields.length === 5 || fields.length === 6) return undefined;
  return `it has ${fields.length} field${fields.length === 1 ? '' : 's'}; a cron expression has 5 (minute hour day-of-month month day-of-week) or 6 (seconds first)${fields.length === 7 ? ', and a 7th field (a year) is not accepted' : ''}`;
}

/**
 * Compiles a 5-field (minute first) or 6-field (second first) cron expression for `timezone`.
 * Nicknames (`@daily`, `@hourly`…) are accepted; day-of-month and day-of-week combine with OR,
 * as in Vixie cron.
 * @throws Error with the reason when the expression or the time zone is invalid, or when the
 *   expression never fires (`0 0 31 2 *`).
 */
export function compileCron(expression: string, timezone: string): CronTimes {
  const tzProblem = timezoneProblem(timezone);
  if (tzProblem) throw new Error(tzProblem);
  if (typeof expression !== 'string' || expression.trim() === '') {
    throw new Error(`cron must be a non-empty string, got ${JSON.stringify(expression)}`);
  }
  // Counted here, as croner's own message ("five, six, or seven parts") offers a 7th field we refuse.
  const fieldProblem = cronFieldProblem(expression);
  if (fieldProblem) throw new Error(`invalid cron ${JSON.stringify(expression)}: ${fieldProblem}`);
  let cron: Cron;
  try {
    cron = new Cron(expression, {
      timezone,
      mode: '5-or-6-parts',
      // Vixie cron's split: lists and ranges of hours are fixed times too (fire once per day
      // across a clock change), only wildcards and steps are intervals.
      fixedTimeRule: 'no-wildcard',
    });
  } catch (err) {
    throw new Error(
      `invalid cron ${JSON.stringify(expression)}: ${String((err as Error)?.message ?? err).replace(/^CronPattern: /, '')}`,
    );
  }
  if (cron.nextRun(new Date()) === null) {
    throw new Error(`cron ${JSON.stringify(expression)} never fires`);
  }
  return {
    expression,
    timezone,
    next: (after) => cron.nextRun(after),
    due(after, upTo, limit) {
      // Walk forward from `after`: the usual case, one fire time due, costs two steps.
      const ahead: Date[] = [];
      for (let t = cron.nextRun(after); t !== null && t <= upTo; t = cron.nextRun(t)) {
        ahead.push(t);
        if (ahead.length > limit) break;
      }
      if (ahead.length <= limit) return { fireTimes: ahead, passedOver: 0 };
      // More than `limit` (downtime): walk back from `upTo` instead. previousRuns excludes its
      // reference itself; 1 ms later includes a fire time at `upTo`.
      const fireTimes = cron
        .previousRuns(limit, new Date(upTo.getTime() + 1))
        .filter((t) => t > after && t <= upTo)
        .reverse();
      const oldest = fireTimes[0];
      const passedOver = oldest
        ? cron.previousRuns(MAX_COUNTED_FIRE_TIMES, oldest).filter((t) => t > after).length
        : 0;
      return { fireTimes, passedOver };
    },
  };
}
