/**
 * Cron schedules against the real server, in-process: each catch-up policy after (simulated)
 * downtime, exactly one run per fire time when several schedulers race, overlap 'skip' and
 * 'allow', pause and resume across a worker restart, triggers, two schedules with one cron,
 * and a schedule no worker carries any more. Downtime is simulated by moving the schedule row's
 * `last_fire_at` back, since the time is PostgreSQL's clock.
 */
import { type Deferred, deferred, waitFor } from '@cyclone/testkit';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  type CatchUp,
  Client,
  newAction,
  newSchedule,
  newWorkflow,
  type Overlap,
  type Schedule,
  ScheduleNotFoundError,
  silentLogger,
  Worker,
} from '../src/index.js';
import { Scheduler } from '../src/scheduler.js';
import { createTestDb, type TestDb } from './support/db.js';

let db: TestDb;
let client: Client;
const workers: Worker[] = [];

beforeAll(async () => {
  db = await createTestDb();
  client = new Client({ connectionString: db.url, poolSize: 6 });
});

afterEach(async () => {
  gate.resolve();
  await Promise.all(workers.splice(0).map((w) => w.stop({ graceMs: 1_000 })));
});

afterAll(async () => {
  await client?.close();
  await db?.drop();
});

type TickInput = { at: string };
const Tick = newWorkflow<TickInput>('sched_tick', {
  nodes: { a: { action: newAction('sched_noop', (_ctx, input: TickInput) => input) } },
});

/** Runs of sched_hold wait for this gate (replaced by each test that uses it). */
let gate: Deferred = deferred();
gate.resolve();
const Hold = newWorkflow<TickInput>('sched_hold', {
  nodes: {
    a: {
      action: newAction('sched_wait', async () => {
        await gate.promise;
        return null;
      }),
    },
  },
});

const input = (t: Date): TickInput => ({ at: t.toISOString() });

function schedule(
  name: string,
  cron: string,
  opts: { catchUp?: CatchUp; overlap?: Overlap; workflow?: typeof Tick } = {},
): Schedule<TickInput> {
  return newSchedule(name, { cron, workflow: opts.workflow ?? Tick, input, ...opts });
}

async function startWorker(schedules: Schedule<TickInput>[], workflows = [Tick, Hold]) {
  const w = new Worker({ client, workflows, schedules, pollIntervalMs: 200 });
  workers.push(w);
  await w.start();
  return w;
}

const scheduler = (s: Schedule<TickInput>) =>
  new Scheduler({ pool: client.pool, db: client.db, log: silentLogger, client, schedules: [s] });

interface RunRow {
  id: string;
  submit_key: string;
  input: TickInput;
  state: string;
  created_at: Date;
}

/** The runs of schedule `name`, by submit key (fire time order). */
async function runsOf(name: string): Promise<RunRow[]> {
  const { rows } = await db.pool.query<RunRow>(
    `SELECT id, submit_key, input, state, created_at FROM cyclone.cyclone_runs
     WHERE submit_key LIKE $1 ORDER BY submit_key`,
    [`schedule:${name}:%`],
  );
  return rows;
}

async function dbNow(): Promise<Date> {
  const { rows } = await db.pool.query<{ now: Date }>('SELECT now() AS now');
  return (rows[0] as { now: Date }).now;
}

async function info(name: string) {
  const s = (await client.listSchedules()).find((x) => x.name === name);
  if (!s) throw new Error(`schedule ${name} not listed`);
  return s;
}

const hour = 3_600_000;

describe('catch-up after downtime', () => {
  /**
   * An hourly cron whose minute is half an hour from now, so the latest due fire time is ~30
   * minutes old (late by any measure); that fire time; and the row set as if the last fire was
   * five hours before it (five fire times missed: L-4h … L).
   */
  async function afterDowntime(name: string, catchUp: CatchUp) {
    const now = await dbNow();
    const minute = (now.getUTCMinutes() + 30) % 60;
    const s = schedule(name, `${minute} * * * *`, { catchUp });
    const latest = new Date(now);
    latest.setUTCMinutes(minute, 0, 0);
    if (latest > now) latest.setTime(latest.getTime() - hour);
    const sch = scheduler(s);
    // The first pass registers the schedule: a new schedule never fires times before it existed.
    expect(await sch.runOnce()).toMatchObject({ fired: 0, missed: 0 });
    expect(await sch.runOnce()).toMatchObject({ fired: 0, missed: 0 });
    await db.pool.query(
      `UPDATE cyclone.cyclone_schedules SET last_fire_at = $2, fires_after = $3 WHERE name = $1`,
      [name, new Date(latest.getTime() - 5 * hour), new Date(latest.getTime() - 6 * hour)],
    );
    return { s, sch, latest };
  }

  const keyAt = (name: string, t: number) => `schedule:${name}:${new Date(t).toISOString()}`;

  it("'latest' (the default) fires only the most recent missed fire time", async () => {
    const { sch, latest } = await afterDowntime('cu-latest', 'latest');
    expect(await sch.runOnce()).toMatchObject({ fired: 1, missed: 4, skipped: 0 });
    const runs = await runsOf('cu-latest');
    expect(runs.map((r) => r.submit_key)).toEqual([keyAt('cu-latest', latest.getTime())]);
    expect(runs[0]?.input).toEqual({ at: latest.toISOString() });
    const s = await info('cu-latest');
    expect(s.lastFireAt?.getTime()).toBe(latest.getTime());
    expect(s.skippedFires).toBe(4);
    expect(s.lastRunId).toBe(runs[0]?.id);
    // Nothing is due any more.
    expect(await sch.runOnce()).toMatchObject({ fired: 0, missed: 0 });
  });

  it('{ max: 3 } fires the 3 most recent, oldest first; { max: 10 } all 5', async () => {
    const { sch, latest } = await afterDowntime('cu-max3', { max: 3 });
    expect(await sch.runOnce()).toMatchObject({ fired: 3, missed: 2 });
    const runs = await runsOf('cu-max3');
    const L = latest.getTime();
    expect(runs.map((r) => r.submit_key)).toEqual(
      [L - 2 * hour, L - hour, L].map((t) => keyAt('cu-max3', t)),
    );
    // Oldest first: each in its own transaction, in fire-time order.
    const created = runs.map((r) => r.created_at.getTime());
    expect([...created].sort((a, b) => a - b)).toEqual(created);
    expect((await info('cu-max3')).skippedFires).toBe(2);

    const ten = await afterDowntime('cu-max10', { max: 10 });
    expect(await ten.sch.runOnce()).toMatchObject({ fired: 5, missed: 0 });
    expect(await runsOf('cu-max10')).toHaveLength(5);
  });

  it("'none' fires no missed fire time, and passes them over", async () => {
    const { sch, latest } = await afterDowntime('cu-none', 'none');
    expect(await sch.runOnce()).toMatchObject({ fired: 0, missed: 5 });
    expect(await runsOf('cu-none')).toEqual([]);
    const s = await info('cu-none');
    expect(s.lastFireAt?.getTime()).toBe(latest.getTime());
    expect(s.skippedFires).toBe(5);
    expect(await sch.runOnce()).toMatchObject({ fired: 0, missed: 0 });
  });

  it("'none' still fires a fire time reached on time", async () => {
    const s = schedule('cu-none-ontime', '* * * * * *', { catchUp: 'none' });
    const sch = scheduler(s);
    await sch.runOnce();
    await db.pool.query(
      `UPDATE cyclone.cyclone_schedules SET fires_after = now() - interval '1.5 seconds'
       WHERE name = $1`,
      ['cu-none-ontime'],
    );
    // One or two fire times in the last 1.5 s, each reached on time: each fires.
    const r = await sch.runOnce();
    expect(r.missed).toBe(0);
    expect(r.fired).toBeGreaterThanOrEqual(1);
    expect(await runsOf('cu-none-ontime')).toHaveLength(r.fired);
  });

  it("a slow tick is not downtime: 'latest' fires every fire time reached at most lateAfterMs late", async () => {
    const s = schedule('cu-slow-tick', '* * * * * *');
    const sch = scheduler(s);
    await sch.runOnce();
    // The last pass was 4.5 s ago (a busy machine): 4 or 5 fire times since, none 10 s late.
    await db.pool.query(
      `UPDATE cyclone.cyclone_schedules SET fires_after = now() - interval '4.5 seconds'
       WHERE name = $1`,
      ['cu-slow-tick'],
    );
    const r = await sch.runOnce();
    expect(r.missed).toBe(0);
    expect(r.fired).toBeGreaterThanOrEqual(4);
    expect(await runsOf('cu-slow-tick')).toHaveLength(r.fired);
  });

  it('schedulers racing on one schedule fire each fire time exactly once', async () => {
    const { s } = await afterDowntime('cu-race', { max: 4 });
    const racers = Array.from({ length: 4 }, () => scheduler(s));
    const results = await Promise.all(racers.map((r) => r.runOnce()));
    expect(results.reduce((n, r) => n + r.fired, 0)).toBe(4);
    expect(results.reduce((n, r) => n + r.missed, 0)).toBe(1);
    expect(await runsOf('cu-race')).toHaveLength(4);
    expect((await info('cu-race')).skippedFires).toBe(1);
  });
});

describe('with workers', () => {
  it('two schedules with the same cron both fire, once per fire time across two workers, on time', async () => {
    const a = schedule('twin-a', '* * * * * *');
    const b = schedule('twin-b', '* * * * * *');
    await startWorker([a, b]);
    await startWorker([b, a]);
    await waitFor('3 runs of each twin', async () => {
      const [ra, rb] = await Promise.all([runsOf('twin-a'), runsOf('twin-b')]);
      return ra.length >= 3 && rb.length >= 3;
    });
    const [ra, rb] = await Promise.all([runsOf('twin-a'), runsOf('twin-b')]);
    const fireTimes = (runs: RunRow[]) => runs.map((r) => r.input.at);
    // One run per fire time (the key is unique; the inputs say which fire time each run is for).
    expect(new Set(fireTimes(ra)).size).toBe(ra.length);
    // Both fired the same seconds.
    const common = fireTimes(ra).filter((t) => fireTimes(rb).includes(t));
    expect(common.length).toBeGreaterThanOrEqual(2);
    // Each run was made within tens of ms of its fire time (PostgreSQL's clock for both).
    const lateness = [...ra, ...rb]
      .map((r) => r.created_at.getTime() - new Date(r.input.at).getTime())
      .sort((x, y) => x - y);
    expect(lateness[0]).toBeGreaterThanOrEqual(0);
    expect(lateness[Math.floor(lateness.length / 2)]).toBeLessThan(200);
    const listed = await info('twin-a');
    expect(listed).toMatchObject({ carried: true, paused: false, cron: '* * * * * *' });
    expect(listed.nextFireAt).toBeInstanceOf(Date);
  });

  it("overlap 'skip' fires nothing while the last run is running; 'allow' does", async () => {
    gate = deferred();
    const skip = schedule('ov-skip', '* * * * * *', { overlap: 'skip', workflow: Hold });
    const allow = schedule('ov-allow', '* * * * * *', { overlap: 'allow', workflow: Hold });
    await startWorker([skip, allow]);
    const first = await waitFor('the first ov-skip run', async () => (await runsOf('ov-skip'))[0]);
    await waitFor('2 skipped fire times', async () => (await info('ov-skip')).skippedFires >= 2);
    expect(await runsOf('ov-skip')).toHaveLength(1);
    expect((await runsOf('ov-allow')).length).toBeGreaterThanOrEqual(2);
    const { skippedFires } = await info('ov-skip');
    gate.resolve();
    await client.waitForRun(first.id, { timeoutMs: 10_000 });
    const second = await waitFor(
      'a second ov-skip run once the first finished',
      async () => (await runsOf('ov-skip'))[1],
    );
    expect(new Date(second.input.at).getTime()).toBeGreaterThan(
      new Date(first.input.at).getTime() + skippedFires * 1000,
    );
    expect((await info('ov-allow')).skippedFires).toBe(0);
  });

  it('pause holds across a worker restart; resume fires again from then on, without backfill', async () => {
    const s = schedule('pr', '* * * * * *');
    const w1 = await startWorker([s]);
    await waitFor('a first run', async () => (await runsOf('pr')).length >= 1);
    await client.pauseSchedule('pr');
    await client.pauseSchedule('pr'); // idempotent
    // A fire that passed the gate just before the pause commits; nothing after it.
    await new Promise((r) => setTimeout(r, 300));
    const atPause = (await runsOf('pr')).length;
    await w1.stop({ graceMs: 1_000 });
    workers.splice(workers.indexOf(w1), 1);

    await startWorker([s]);
    const listed = await info('pr');
    expect(listed).toMatchObject({ paused: true, carried: true, nextFireAt: null });
    await new Promise((r) => setTimeout(r, 2_500));
    expect(await runsOf('pr')).toHaveLength(atPause);

    const resumedAt = await dbNow();
    await client.resumeSchedule('pr');
    await waitFor('a run after the resume', async () => (await runsOf('pr')).length > atPause);
    const after = (await runsOf('pr')).slice(atPause);
    // No fire time from the paused stretch: every new run is for a time after the resume.
    for (const r of after)
      expect(new Date(r.input.at).getTime()).toBeGreaterThan(resumedAt.getTime() - 1);
    expect((await info('pr')).paused).toBe(false);
    await client.resumeSchedule('pr'); // idempotent
  });

  it('trigger makes one run now, once across workers, paused or not, and waits for a worker if none carries it', async () => {
    const yearly = schedule('trig', '0 0 1 1 *');
    await startWorker([yearly]);
    await startWorker([yearly]);
    const t1 = await client.triggerSchedule('trig');
    expect(t1.carried).toBe(true);
    const first = await waitFor('the trigger run', async () => (await runsOf('trig'))[0]);
    expect(first.submit_key).toMatch(/^schedule:trig:trigger:\d{4}-\d\d-\d\dT[\d:.]+Z$/);
    expect(new Date(first.input.at).getTime()).toBe(t1.requestedAt.getTime());
    // Made promptly (NOTIFY), not at the next refresh.
    expect(first.created_at.getTime() - t1.requestedAt.getTime()).toBeLessThan(1_000);

    await client.pauseSchedule('trig');
    await client.triggerSchedule('trig');
    await waitFor(
      'a second trigger run, while paused',
      async () => (await runsOf('trig')).length === 2,
    );
    await new Promise((r) => setTimeout(r, 500));
    expect(await runsOf('trig')).toHaveLength(2);
    expect((await info('trig')).lastRunId).toBe((await runsOf('trig'))[1]?.id);

    // No worker running: the request waits, listed, and is fired once when one starts.
    await Promise.all(workers.splice(0).map((w) => w.stop({ graceMs: 1_000 })));
    const t3 = await client.triggerSchedule('trig');
    const t3again = await client.triggerSchedule('trig');
    expect(t3again.requestedAt.getTime()).toBe(t3.requestedAt.getTime()); // one waiting request
    expect((await info('trig')).triggerRequestedAt?.getTime()).toBe(t3.requestedAt.getTime());
    await new Promise((r) => setTimeout(r, 300));
    expect(await runsOf('trig')).toHaveLength(2);
    await startWorker([yearly]);
    await startWorker([yearly]);
    await waitFor('the waiting trigger fired', async () => (await runsOf('trig')).length === 3);
    await new Promise((r) => setTimeout(r, 300));
    expect(await runsOf('trig')).toHaveLength(3);
    expect((await info('trig')).triggerRequestedAt).toBeNull();

    await expect(client.triggerSchedule('no-such')).rejects.toBeInstanceOf(ScheduleNotFoundError);
    await expect(client.pauseSchedule('no-such')).rejects.toMatchObject({
      code: 'SCHEDULE_NOT_FOUND',
      schedule: 'no-such',
    });
    await expect(client.resumeSchedule('no\u0000such')).rejects.toBeInstanceOf(
      ScheduleNotFoundError,
    );
  });

  it('a schedule no worker carries any more is listed carried: false and does not fire', async () => {
    const gone = schedule('gone', '* * * * * *');
    const kept = schedule('kept', '* * * * * *');
    const w = await startWorker([gone, kept]);
    await waitFor('a run of gone', async () => (await runsOf('gone')).length >= 1);
    await w.stop({ graceMs: 1_000 });
    workers.splice(workers.indexOf(w), 1);
    // Within the bound (a minute) it still counts as carried: a worker may just be restarting.
    expect((await info('gone')).carried).toBe(true);
    // As if a minute had passed without a worker carrying it.
    await db.pool.query(
      `UPDATE cyclone.cyclone_schedules SET last_seen_at = now() - interval '61 seconds'
       WHERE name = 'gone'`,
    );
    const before = (await runsOf('gone')).length;
    await startWorker([kept]);
    const keptBefore = (await runsOf('kept')).length;
    await waitFor('kept fires again', async () => (await runsOf('kept')).length >= keptBefore + 2);
    expect(await runsOf('gone')).toHaveLength(before);
    const listed = await info('gone');
    expect(listed).toMatchObject({ carried: false, nextFireAt: null, paused: false });
    expect((await info('kept')).carried).toBe(true);
  });
});
