/**
 * The fire-time computation of cron schedules (cron.ts), without a database: DST in
 * Europe/Paris and America/New_York on both transitions (the skipped hour and the repeated
 * hour) for a daily 02:30 schedule and an hourly one, 6-field expressions, and the catch-up
 * window `due(after, upTo, limit)`.
 */
import { describe, expect, it } from 'vitest';
import { compileCron, MAX_COUNTED_FIRE_TIMES, timezoneProblem } from '../src/cron.js';

/** The next `n` fire times strictly after `from`, as ISO strings. */
function nextTimes(cron: string, timezone: string, from: string, n: number): string[] {
  const times = compileCron(cron, timezone);
  const out: string[] = [];
  let t: Date | null = new Date(from);
  for (let i = 0; i < n; i++) {
    t = times.next(t as Date);
    if (!t) break;
    out.push(t.toISOString());
  }
  return out;
}

/** `t` as wall-clock time in `timezone`: `YYYY-MM-DD HH:MM`. */
function wall(t: string, timezone: string): string {
  const f = new Intl.DateTimeFormat('sv-SE', {
    timeZone: timezone,
    dateStyle: 'short',
    timeStyle: 'short',
  });
  return f.format(new Date(t));
}

describe('DST, Europe/Paris (2026: spring forward 29 March 02:00 → 03:00, fall back 25 October 03:00 → 02:00)', () => {
  const tz = 'Europe/Paris';

  it('daily 02:30: on the skipped day it fires once, at 03:00 (the first valid time after the gap)', () => {
    const got = nextTimes('30 2 * * *', tz, '2026-03-27T12:00:00Z', 3);
    expect(got).toEqual([
      '2026-03-28T01:30:00.000Z', // 02:30 CET
      '2026-03-29T01:00:00.000Z', // 03:00 CEST: 02:30 does not exist that day
      '2026-03-30T00:30:00.000Z', // 02:30 CEST
    ]);
    expect(got.map((t) => wall(t, tz))).toEqual([
      '2026-03-28 02:30',
      '2026-03-29 03:00',
      '2026-03-30 02:30',
    ]);
  });

  it('daily 02:30: on the repeated day it fires once, at the first 02:30 (CEST)', () => {
    expect(nextTimes('30 2 * * *', tz, '2026-10-23T12:00:00Z', 3)).toEqual([
      '2026-10-24T00:30:00.000Z', // 02:30 CEST
      '2026-10-25T00:30:00.000Z', // 02:30 CEST, the first pass; not 01:30Z (02:30 CET) as well
      '2026-10-26T01:30:00.000Z', // 02:30 CET
    ]);
  });

  it('hourly: the skipped hour has no fire time, every real hour has one', () => {
    const got = nextTimes('0 * * * *', tz, '2026-03-28T23:30:00Z', 3);
    expect(got).toEqual([
      '2026-03-29T00:00:00.000Z',
      '2026-03-29T01:00:00.000Z',
      '2026-03-29T02:00:00.000Z',
    ]);
    expect(got.map((t) => wall(t, tz))).toEqual([
      '2026-03-29 01:00',
      '2026-03-29 03:00',
      '2026-03-29 04:00',
    ]);
  });

  it('hourly: the repeated hour fires on both passes', () => {
    const got = nextTimes('0 * * * *', tz, '2026-10-24T23:30:00Z', 3);
    expect(got).toEqual([
      '2026-10-25T00:00:00.000Z', // 02:00 CEST
      '2026-10-25T01:00:00.000Z', // 02:00 CET
      '2026-10-25T02:00:00.000Z', // 03:00 CET
    ]);
    expect(got.map((t) => wall(t, tz))).toEqual([
      '2026-10-25 02:00',
      '2026-10-25 02:00',
      '2026-10-25 03:00',
    ]);
  });

  it('6-field with seconds (0 30 2 * * *) behaves as the 5-field daily 02:30', () => {
    expect(nextTimes('0 30 2 * * *', tz, '2026-03-27T12:00:00Z', 3)).toEqual(
      nextTimes('30 2 * * *', tz, '2026-03-27T12:00:00Z', 3),
    );
    expect(nextTimes('0 30 2 * * *', tz, '2026-10-23T12:00:00Z', 3)).toEqual(
      nextTimes('30 2 * * *', tz, '2026-10-23T12:00:00Z', 3),
    );
  });

  it('a list of hours (30 2,14 * * *) is fixed-time as in Vixie cron: once per listed time', () => {
    expect(nextTimes('30 2,14 * * *', tz, '2026-10-24T23:00:00Z', 2)).toEqual([
      '2026-10-25T00:30:00.000Z', // 02:30 CEST only
      '2026-10-25T13:30:00.000Z', // 14:30 CET
    ]);
    expect(nextTimes('30 2,14 * * *', tz, '2026-03-28T23:00:00Z', 2)).toEqual([
      '2026-03-29T01:00:00.000Z', // 03:00 CEST, after the gap
      '2026-03-29T12:30:00.000Z', // 14:30 CEST
    ]);
  });
});

describe('DST, America/New_York (2026: spring forward 8 March 02:00 → 03:00, fall back 1 November 02:00 → 01:00)', () => {
  const tz = 'America/New_York';

  it('daily 02:30: on the skipped day it fires once, at 03:00 EDT', () => {
    expect(nextTimes('30 2 * * *', tz, '2026-03-06T12:00:00Z', 3)).toEqual([
      '2026-03-07T07:30:00.000Z', // 02:30 EST
      '2026-03-08T07:00:00.000Z', // 03:00 EDT
      '2026-03-09T06:30:00.000Z', // 02:30 EDT
    ]);
  });

  it('daily 02:30 on the fall-back day: 02:30 occurs once (EST), and fires once', () => {
    expect(nextTimes('30 2 * * *', tz, '2026-10-30T12:00:00Z', 3)).toEqual([
      '2026-10-31T06:30:00.000Z', // 02:30 EDT
      '2026-11-01T07:30:00.000Z', // 02:30 EST
      '2026-11-02T07:30:00.000Z',
    ]);
  });

  it('daily 01:30 (inside the repeated hour): fires once, at the first pass (EDT)', () => {
    expect(nextTimes('30 1 * * *', tz, '2026-10-30T12:00:00Z', 3)).toEqual([
      '2026-10-31T05:30:00.000Z', // 01:30 EDT
      '2026-11-01T05:30:00.000Z', // 01:30 EDT; not 06:30Z (01:30 EST) as well
      '2026-11-02T06:30:00.000Z', // 01:30 EST
    ]);
  });

  it('hourly: the skipped hour has no fire time', () => {
    const got = nextTimes('0 * * * *', tz, '2026-03-08T05:30:00Z', 3);
    expect(got).toEqual([
      '2026-03-08T06:00:00.000Z',
      '2026-03-08T07:00:00.000Z',
      '2026-03-08T08:00:00.000Z',
    ]);
    expect(got.map((t) => wall(t, tz))).toEqual([
      '2026-03-08 01:00',
      '2026-03-08 03:00',
      '2026-03-08 04:00',
    ]);
  });

  it('hourly: the repeated hour fires on both passes', () => {
    const got = nextTimes('0 * * * *', tz, '2026-11-01T04:30:00Z', 3);
    expect(got).toEqual([
      '2026-11-01T05:00:00.000Z', // 01:00 EDT
      '2026-11-01T06:00:00.000Z', // 01:00 EST
      '2026-11-01T07:00:00.000Z', // 02:00 EST
    ]);
    expect(got.map((t) => wall(t, tz))).toEqual([
      '2026-11-01 01:00',
      '2026-11-01 01:00',
      '2026-11-01 02:00',
    ]);
  });
});

describe('expressions and time zones', () => {
  it('6 fields put seconds first', () => {
    expect(nextTimes('*/15 * * * * *', 'UTC', '2026-01-01T00:00:00Z', 4)).toEqual([
      '2026-01-01T00:00:15.000Z',
      '2026-01-01T00:00:30.000Z',
      '2026-01-01T00:00:45.000Z',
      '2026-01-01T00:01:00.000Z',
    ]);
    expect(nextTimes('* * * * * *', 'UTC', '2026-01-01T00:00:00.500Z', 2)).toEqual([
      '2026-01-01T00:00:01.000Z',
      '2026-01-01T00:00:02.000Z',
    ]);
  });

  it('refuses bad expressions, 7 fields, one that never fires, and unknown time zones', () => {
    for (const bad of ['', '* * *', '61 * * * *', '* * * * * * *', 'hello', '*/0 * * * *']) {
      expect(() => compileCron(bad, 'UTC'), bad).toThrow(/cron/);
    }
    expect(() => compileCron('0 0 31 2 *', 'UTC')).toThrow(/never fires/);
    expect(() => compileCron('0 3 * * *', 'Mars/Olympus')).toThrow(/unknown time zone/);
    expect(timezoneProblem('+01:00')).toMatch(/unknown time zone/);
    expect(timezoneProblem('')).toMatch(/IANA/);
    expect(timezoneProblem(42)).toMatch(/IANA/);
    expect(timezoneProblem('Europe/Paris')).toBeUndefined();
    expect(timezoneProblem('UTC')).toBeUndefined();
  });
});

describe('due(after, upTo, limit): the fire times a pass considers', () => {
  const minutely = compileCron('* * * * *', 'UTC');
  const d = (s: string) => new Date(s);

  it('nothing in an empty or inverted range; `after` excluded, `upTo` included', () => {
    expect(minutely.due(d('2026-01-01T00:00:30Z'), d('2026-01-01T00:00:59Z'), 1)).toEqual({
      fireTimes: [],
      passedOver: 0,
    });
    expect(minutely.due(d('2026-01-01T00:05:00Z'), d('2026-01-01T00:01:00Z'), 1).fireTimes).toEqual(
      [],
    );
    const r = minutely.due(d('2026-01-01T00:00:00Z'), d('2026-01-01T00:01:00Z'), 5);
    expect(r.fireTimes.map((t) => t.toISOString())).toEqual(['2026-01-01T00:01:00.000Z']);
    expect(r.passedOver).toBe(0);
  });

  it("limit 1 ('latest', 'none'): the most recent, and how many earlier ones were passed over", () => {
    const r = minutely.due(d('2026-01-01T00:00:00Z'), d('2026-01-01T00:10:30Z'), 1);
    expect(r.fireTimes.map((t) => t.toISOString())).toEqual(['2026-01-01T00:10:00.000Z']);
    expect(r.passedOver).toBe(9);
  });

  it('limit n ({ max: n }): the n most recent, oldest first', () => {
    const r = minutely.due(d('2026-01-01T00:00:00Z'), d('2026-01-01T00:10:30Z'), 3);
    expect(r.fireTimes.map((t) => t.toISOString())).toEqual([
      '2026-01-01T00:08:00.000Z',
      '2026-01-01T00:09:00.000Z',
      '2026-01-01T00:10:00.000Z',
    ]);
    expect(r.passedOver).toBe(7);
    // Fewer due than the limit: all of them.
    const all = minutely.due(d('2026-01-01T00:07:30Z'), d('2026-01-01T00:10:30Z'), 10);
    expect(all.fireTimes).toHaveLength(3);
    expect(all.passedOver).toBe(0);
  });

  it('a long downtime costs bounded work and counts at most MAX_COUNTED_FIRE_TIMES passed over', () => {
    const perSecond = compileCron('* * * * * *', 'UTC');
    const started = performance.now();
    const r = perSecond.due(d('2025-01-01T00:00:00Z'), d('2026-01-01T00:00:00Z'), 1);
    expect(performance.now() - started).toBeLessThan(2_000);
    expect(r.fireTimes.map((t) => t.toISOString())).toEqual(['2026-01-01T00:00:00.000Z']);
    expect(r.passedOver).toBe(MAX_COUNTED_FIRE_TIMES);
  });

  it('counts DST correctly: hourly in Paris over the fall-back night has 25 fire times', () => {
    const hourly = compileCron('0 * * * *', 'Europe/Paris');
    const r = hourly.due(d('2026-10-24T22:00:00Z'), d('2026-10-25T23:00:00Z'), 100);
    expect(r.fireTimes).toHaveLength(25);
  });
});
