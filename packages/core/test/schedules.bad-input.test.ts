/**
 * Bad input, cron schedules: every bad `newSchedule` option (name, cron, time zone, workflow,
 * input, catchUp, overlap), a bad `Worker({ schedules })`, and operator calls on unknown or
 * unstorable names are typed errors (ConfigError, ScheduleNotFoundError) and write nothing; an
 * input function that throws, or an input the workflow refuses, costs its fire time (counted,
 * logged) and nothing else.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  Client,
  ConfigError,
  newAction,
  newSchedule,
  newWorkflow,
  type Schedule,
  ScheduleNotFoundError,
  silentLogger,
  Worker,
  type Workflow,
} from '../src/index.js';
import { Scheduler } from '../src/scheduler.js';
import { createTestDb, type TestDb } from './support/db.js';
import { fingerprint } from './support/fingerprint.js';

let db: TestDb;
let client: Client;

beforeAll(async () => {
  db = await createTestDb();
  client = new Client({ connectionString: db.url, poolSize: 2 });
});

afterAll(async () => {
  await client?.close();
  await db?.drop();
});

const Noop = newAction('bad_noop', () => null);
const Report = newWorkflow('bad_report', {
  input: z.object({ day: z.string().length(10) }),
  nodes: { a: { action: Noop } },
});
const Other = newWorkflow('bad_other', { nodes: { a: { action: Noop } } });
const day = (t: Date) => ({ day: t.toISOString().slice(0, 10) });
const good = { cron: '0 3 * * *', workflow: Report, input: day };

// biome-ignore lint/suspicious/noExplicitAny: bad input on purpose
const loose = (name: unknown, options: unknown) => newSchedule(name as string, options as any);

describe('newSchedule refuses bad definitions with ConfigError, before anything is written', () => {
  it('names, crons, time zones, workflows, inputs, catchUp and overlap', async () => {
    const before = await fingerprint(db.pool);
    const cases: [string, unknown, unknown, RegExp][] = [
      ['empty name', '', good, /not a plain identifier/],
      ['name with a colon', 'a:b', good, /not a plain identifier/],
      ['name with a space', 'a b', good, /not a plain identifier/],
      ['name starting with a digit', '1x', good, /not a plain identifier/],
      ['name of 64 characters', 'x'.repeat(64), good, /not a plain identifier/],
      ['name not a string', 42, good, /not a plain identifier/],
      ['no options', 'n', undefined, /options must be an object/],
      ['empty cron', 'n', { ...good, cron: '' }, /cron must be a non-empty string/],
      ['cron not a string', 'n', { ...good, cron: 5 }, /cron must be a non-empty string/],
      [
        '3 fields',
        'n',
        { ...good, cron: '* * *' },
        /invalid cron "\* \* \*": it has 3 fields; a cron expression has 5 \(minute hour day-of-month month day-of-week\) or 6 \(seconds first\)$/,
      ],
      ['minute 61', 'n', { ...good, cron: '61 * * * *' }, /invalid cron/],
      [
        '7 fields',
        'n',
        { ...good, cron: '0 0 0 * * * 2030' },
        /it has 7 fields; .* or 6 \(seconds first\), and a 7th field \(a year\) is not accepted$/,
      ],
      [
        '8 fields',
        'n',
        { ...good, cron: '* * * * * * * *' },
        /it has 8 fields; a cron expression has 5 /,
      ],
      ['words', 'n', { ...good, cron: 'every day' }, /invalid cron "every day": it has 2 fields/],
      [
        'unknown nickname',
        'n',
        { ...good, cron: '@fortnightly' },
        /unknown nickname "@fortnightly" \(accepted: @yearly, /,
      ],
      ['nickname and fields', 'n', { ...good, cron: '@daily 5' }, /a nickname stands alone/],
      ['step 0', 'n', { ...good, cron: '*/0 * * * *' }, /invalid cron/],
      ['never fires', 'n', { ...good, cron: '0 0 30 2 *' }, /never fires/],
      ['unknown zone', 'n', { ...good, timezone: 'Mars/Olympus' }, /unknown time zone/],
      ['offset, not a zone', 'n', { ...good, timezone: '+01:00' }, /unknown time zone/],
      ['empty zone', 'n', { ...good, timezone: '' }, /IANA time zone/],
      ['zone not a string', 'n', { ...good, timezone: 1 }, /IANA time zone/],
      ['no workflow', 'n', { ...good, workflow: undefined }, /made by newWorkflow/],
      ['an action as workflow', 'n', { ...good, workflow: Noop }, /made by newWorkflow/],
      ['no input', 'n', { ...good, input: undefined }, /input must be a function/],
      ['input not a function', 'n', { ...good, input: { day: 'x' } }, /input must be a function/],
      ['catchUp word', 'n', { ...good, catchUp: 'all' }, /catchUp must be/],
      ['catchUp max 0', 'n', { ...good, catchUp: { max: 0 } }, /catchUp must be/],
      ['catchUp max 1.5', 'n', { ...good, catchUp: { max: 1.5 } }, /catchUp must be/],
      ['catchUp max 1001', 'n', { ...good, catchUp: { max: 1001 } }, /catchUp must be/],
      ['catchUp max missing', 'n', { ...good, catchUp: {} }, /catchUp must be/],
      ['overlap word', 'n', { ...good, overlap: 'queue' }, /overlap must be/],
      ['overlap boolean', 'n', { ...good, overlap: true }, /overlap must be/],
    ];
    for (const [what, name, options, message] of cases) {
      let err: unknown;
      try {
        loose(name, options);
      } catch (e) {
        err = e;
      }
      expect(err, what).toBeInstanceOf(ConfigError);
      expect((err as ConfigError).code, what).toBe('CONFIG');
      expect((err as Error).message, what).toMatch(message);
      // croner's own count ("five, six, or seven parts") contradicts the documented 5 or 6.
      expect((err as Error).message, what).not.toMatch(/seven|parts/);
      if (typeof name === 'string' && name === 'n') {
        expect((err as Error).message, what).toMatch(/^schedule 'n': /);
      }
    }
    expect(await fingerprint(db.pool)).toEqual(before);
  });

  it('accepts the documented forms', () => {
    const s = newSchedule('nightly-report', {
      cron: '0 3 * * *',
      timezone: 'Europe/Paris',
      workflow: Report,
      input: day,
      catchUp: { max: 10 },
      overlap: 'skip',
    });
    expect(s).toMatchObject({
      kind: 'schedule',
      name: 'nightly-report',
      timezone: 'Europe/Paris',
      catchUp: { max: 10 },
      overlap: 'skip',
    });
    expect(Object.isFrozen(s)).toBe(true);
    expect(newSchedule('every_5s', { ...good, cron: '*/5 * * * * *' })).toMatchObject({
      timezone: 'UTC',
      catchUp: 'latest',
      overlap: 'allow',
    });
    expect(newSchedule('daily', { ...good, cron: '@daily' }).cron).toBe('@daily');
  });
});

describe('Worker({ schedules }) refuses bad schedule lists with ConfigError', () => {
  it('a schedule whose workflow the worker does not carry, duplicates, things not made by newSchedule', async () => {
    const before = await fingerprint(db.pool);
    const s = newSchedule('w-report', good);
    // biome-ignore lint/suspicious/noExplicitAny: bad input on purpose
    const make = (schedules: unknown, workflows: Workflow<any>[] = [Report]) =>
      // biome-ignore lint/suspicious/noExplicitAny: bad input on purpose
      new Worker({ client, workflows, schedules: schedules as any });
    expect(() => make([s], [Other])).toThrow(ConfigError);
    expect(() => make([s], [Other])).toThrow(
      /runs workflow 'bad_report', which this worker does not carry/,
    );
    expect(() => make([s, newSchedule('w-report', good)])).toThrow(/given twice/);
    expect(() => make([{ name: 'fake', cron: '* * * * *' }])).toThrow(/made by newSchedule/);
    expect(() => make([null])).toThrow(/made by newSchedule/);
    expect(() => make('w-report')).toThrow(/array/);
    expect(await fingerprint(db.pool)).toEqual(before);
  });
});

describe('operator calls on a schedule that does not exist: ScheduleNotFoundError, nothing written', () => {
  it('pause, resume and trigger', async () => {
    const before = await fingerprint(db.pool);
    const names: unknown[] = [
      'no-such',
      '',
      "x'; DROP TABLE cyclone.cyclone_schedules; --",
      'a\u0000b',
      '\ud800',
      42,
    ];
    for (const name of names) {
      for (const op of ['pauseSchedule', 'resumeSchedule', 'triggerSchedule'] as const) {
        const err = await client[op](name as string).then(
          () => undefined,
          (e: unknown) => e,
        );
        expect(err, `${op}(${JSON.stringify(name)})`).toBeInstanceOf(ScheduleNotFoundError);
        expect((err as ScheduleNotFoundError).code).toBe('SCHEDULE_NOT_FOUND');
      }
    }
    expect(await client.listSchedules()).toEqual([]);
    expect(await fingerprint(db.pool)).toEqual(before);
  });
});

describe('an input that cannot be made costs its fire time, logged, and nothing else', () => {
  const scheduler = (s: Schedule<{ day: string }>) =>
    new Scheduler({ pool: client.pool, db: client.db, log: silentLogger, client, schedules: [s] });

  /**
   * One fire time due now (the last whole minute, for an every-minute cron), and the next a
   * minute away: the test's passes all fall between the two (it waits out a minute's last two
   * seconds first), however slow the machine.
   */
  async function dueNow(name: string) {
    const { rows } = await db.pool.query<{ left_ms: number }>(
      `SELECT (extract(epoch FROM date_trunc('minute', now()) + interval '1 minute' - now()) * 1000)::float8 AS left_ms`,
    );
    const left = rows[0]?.left_ms ?? 60_000;
    if (left < 2_000) await new Promise((r) => setTimeout(r, left + 100));
    await db.pool.query(
      `UPDATE cyclone.cyclone_schedules
       SET fires_after = date_trunc('minute', now()) - interval '0.5 seconds' WHERE name = $1`,
      [name],
    );
  }

  it('an input function that throws, or an input the workflow refuses: no run, counted', async () => {
    const throws = newSchedule('in-throws', {
      ...good,
      cron: '0 * * * * *',
      input: () => {
        throw new Error('no report today');
      },
    });
    const refused = newSchedule('in-refused', {
      ...good,
      cron: '0 * * * * *',
      input: () => ({ day: 'not a day' }),
    });
    for (const s of [throws, refused]) {
      const sch = scheduler(s);
      await sch.runOnce(); // registers it
      await dueNow(s.name);
      expect(await sch.runOnce()).toMatchObject({ fired: 0, failed: 1 });
      // The fire time is dealt with: not tried again on every pass.
      expect(await sch.runOnce()).toMatchObject({ fired: 0, failed: 0 });
      const listed = (await client.listSchedules()).find((x) => x.name === s.name);
      expect(listed).toMatchObject({ skippedFires: 1, lastRunId: null });
      expect(listed?.lastFireAt).toBeInstanceOf(Date);
    }
    const { rows } = await db.pool.query('SELECT count(*)::int AS n FROM cyclone.cyclone_runs');
    expect(rows[0].n).toBe(0);
  });
});
