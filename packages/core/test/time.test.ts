/**
 * Time: delayed runs on every submit form, durable node timers and snooze, checked against the
 * database's own timestamps (`scheduled_at`, `started_at`, `completed_at` are PostgreSQL's clock).
 * Bad times are refused with a typed error before anything is written.
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  Client,
  ConfigError,
  InputValidationError,
  MAX_DELAY_MS,
  newAction,
  newWorkflow,
  SnoozeError,
  Worker,
  WorkflowDefinitionError,
} from '../src/index.js';
import { claimStepsSql } from '../src/sql/claim.js';
import { createTestDb, type TestDb } from './support/db.js';

let db: TestDb;
let client: Client;
const workers: Worker[] = [];

/** The database's clock now. */
async function dbNow(): Promise<Date> {
  const { rows } = await client.pool.query<{ now: Date }>('SELECT now() AS now');
  return (rows[0] as { now: Date }).now;
}

const Echo = newAction('time_echo', async (ctx) => ({ node: ctx.node, attempt: ctx.attempt }));
const Delayed = newWorkflow('time_delayed', { nodes: { only: { action: Echo } } });
const Timer = newWorkflow('time_timer', {
  nodes: {
    first: { action: Echo },
    reminder: { action: Echo, after: ['first'], delayMs: 700 },
  },
});

let snoozesLeft = 0;
const Snoozy = newAction(
  'time_snoozy',
  async () => {
    if (snoozesLeft > 0) {
      snoozesLeft--;
      throw new SnoozeError(20);
    }
    return 'done';
  },
  { maxAttempts: 2 },
);
const SnoozeFlow = newWorkflow('time_snooze', { nodes: { only: { action: Snoozy } } });
const Forever = newAction(
  'time_forever',
  async () => {
    throw new SnoozeError(5);
  },
  { maxSnoozes: 3 },
);
const ForeverFlow = newWorkflow('time_forever', { nodes: { only: { action: Forever } } });
const ALL = [Delayed, Timer, SnoozeFlow, ForeverFlow];

async function startWorkers(n: number): Promise<void> {
  for (let i = 0; i < n; i++) {
    const w = new Worker({ client, workflows: ALL, concurrency: 5, pollIntervalMs: 1_000 });
    await w.start();
    workers.push(w);
  }
}

beforeAll(async () => {
  db = await createTestDb();
  client = new Client({ connectionString: db.url, poolSize: 4 });
  await startWorkers(4);
});

afterAll(async () => {
  await Promise.all(workers.map((w) => w.stop({ graceMs: 1_000 })));
  await client?.close();
  await db?.drop();
});

describe('delayed runs', () => {
  it('is not started before runAt by 4 workers, and starts after it', async () => {
    const runAt = new Date((await dbNow()).getTime() + 1_500);
    const { runId } = await client.submit(Delayed, {}, { runAt });
    const waiting = await client.getRun(runId);
    expect(waiting.steps[0]?.state).toBe('scheduled');
    expect(waiting.steps[0]?.scheduledAt.getTime()).toBe(runAt.getTime());
    const run = await client.waitForRun(runId, { timeoutMs: 10_000, pollMs: 50 });
    expect(run.state).toBe('completed');
    const step = run.steps[0];
    // Both timestamps are the database's clock.
    expect(step?.startedAt?.getTime()).toBeGreaterThanOrEqual(runAt.getTime());
    expect(step?.attempt).toBe(1);
  });

  it('takes delayMs on every submit form, with and without a transaction', async () => {
    const before = await dbNow();
    const a = await client.submit(Delayed, {}, { delayMs: 400 });
    const b = await client.submitOnce(Delayed, 'time-once', {}, { delayMs: 400 });
    const c = await client.submitMany(Delayed, [{}, {}], { delayMs: 400 });
    const d = await Delayed.submit(client, {}, { delayMs: 400 });
    const e = await Delayed.submitOnce(client, 'time-once-method', {}, { delayMs: 400 });
    const conn = await client.pool.connect();
    let f: string;
    try {
      await conn.query('BEGIN');
      f = (await client.submit(Delayed, {}, { tx: conn, delayMs: 400 })).runId;
      await conn.query('COMMIT');
    } finally {
      conn.release();
    }
    const ids = [a.runId, b.runId, ...c.runIds, d.runId, e.runId, f];
    for (const id of ids) {
      const run = await client.waitForRun(id, { timeoutMs: 10_000, pollMs: 50 });
      expect(run.state, id).toBe('completed');
      expect(run.steps[0]?.startedAt?.getTime(), id).toBeGreaterThanOrEqual(before.getTime() + 400);
    }
  });

  it('a runAt in the past starts at once', async () => {
    const { runId } = await client.submit(Delayed, {}, { runAt: new Date(Date.now() - 60_000) });
    expect((await client.getRun(runId)).steps[0]?.state).not.toBe('scheduled');
    expect((await client.waitForRun(runId, { timeoutMs: 5_000, pollMs: 50 })).state).toBe(
      'completed',
    );
  });

  it('a cancelled run leaves no scheduled step behind', async () => {
    const { runId } = await client.submit(Delayed, {}, { delayMs: 60_000 });
    await client.cancel(runId);
    const run = await client.getRun(runId);
    expect(run.state).toBe('cancelled');
    expect(run.steps.map((s) => s.state)).toEqual(['cancelled']);
  });
});

describe('a due step is not held back by a claim that filled some slots', () => {
  it('a delayed run starts at its time while another step runs, whatever the poll interval', async () => {
    // One worker, a long poll: the claim that takes the slow run fills 1 of its 10 slots, and the
    // delayed run must still start at its time, not a poll interval later.
    let release!: () => void;
    const held = new Promise<void>((r) => {
      release = r;
    });
    const Slow = newAction('time_slow', async () => {
      await held;
      return null;
    });
    const SlowFlow = newWorkflow('time_slow', { nodes: { only: { action: Slow } } });
    const Late = newWorkflow('time_late', { nodes: { only: { action: Echo } } });
    const w = new Worker({
      client,
      workflows: [SlowFlow, Late],
      concurrency: 10,
      pollIntervalMs: 5_000,
    });
    await w.start();
    try {
      const late = await client.submit(Late, {}, { delayMs: 600 });
      await client.submit(SlowFlow, {});
      const run = await client.waitForRun(late.runId, { timeoutMs: 10_000, pollMs: 50 });
      const step = run.steps[0];
      if (!step?.startedAt) throw new Error('the delayed run never started');
      const lateBy = step.startedAt.getTime() - step.scheduledAt.getTime();
      // Far below the 5 s poll interval (both timestamps are the database's clock).
      expect(lateBy).toBeLessThan(1_500);
    } finally {
      release();
      await w.stop({ graceMs: 2_000 });
    }
  });
});

describe('node timers', () => {
  it('a node with delayMs becomes claimable that long after its upstream completed', async () => {
    const { runId } = await client.submit(Timer, {});
    const run = await client.waitForRun(runId, { timeoutMs: 10_000, pollMs: 50 });
    expect(run.state).toBe('completed');
    const first = run.steps.find((s) => s.node === 'first');
    const reminder = run.steps.find((s) => s.node === 'reminder');
    const firstDone = first?.completedAt;
    if (!firstDone) throw new Error('first has no completedAt');
    expect(reminder?.scheduledAt.getTime()).toBeGreaterThanOrEqual(firstDone.getTime() + 700);
    expect(reminder?.startedAt?.getTime()).toBeGreaterThanOrEqual(firstDone.getTime() + 700);
    expect(reminder?.attempt).toBe(1);
  });
});

describe('snooze', () => {
  it('10 snoozes with maxAttempts 2, then success: completed, snoozes 10, no errors', async () => {
    snoozesLeft = 10;
    const { runId } = await client.submit(SnoozeFlow, {});
    const run = await client.waitForRun(runId, { timeoutMs: 20_000, pollMs: 50 });
    expect(run.state).toBe('completed');
    const step = run.steps[0];
    expect(step?.snoozes).toBe(10);
    expect(step?.errors).toEqual([]);
    expect(step?.output).toBe('done');
  });

  it('one snooze more than maxSnoozes discards the step with a clear error', async () => {
    const { runId } = await client.submit(ForeverFlow, {});
    const run = await client.waitForRun(runId, { timeoutMs: 20_000, pollMs: 50 });
    expect(run.state).toBe('failed');
    const step = run.steps[0];
    expect(step?.state).toBe('discarded');
    expect(step?.snoozes).toBe(3);
    expect(step?.errors.map((e) => e.kind)).toEqual(['snooze_limit']);
    expect(step?.errors[0]?.message).toMatch(/snoozed 3 times.*maxSnoozes \(3\)/);
  });
});

describe('bad times are refused before anything is written', () => {
  it('at submit: an invalid Date, both options, a negative, non-finite or too long delay', async () => {
    const runs = async () =>
      Number((await client.pool.query('SELECT count(*) AS n FROM cyclone.cyclone_runs')).rows[0].n);
    const before = await runs();
    const bad: Parameters<typeof client.submit>[2][] = [
      { runAt: new Date('not a date') },
      { runAt: 'tomorrow' as unknown as Date },
      { runAt: new Date(Date.now() + MAX_DELAY_MS + 86_400_000) },
      { runAt: new Date(), delayMs: 5 },
      { delayMs: -1 },
      { delayMs: Number.NaN },
      { delayMs: Number.POSITIVE_INFINITY },
      { delayMs: MAX_DELAY_MS + 1 },
      { delayMs: '5' as unknown as number },
      { runAt: new Date(-8.64e15) },
      { runAt: new Date('0000-06-01T00:00:00Z') },
    ];
    for (const options of bad) {
      await expect(client.submit(Delayed, {}, options), JSON.stringify(options)).rejects.toThrow(
        InputValidationError,
      );
      await expect(client.submitOnce(Delayed, 'bad-time', {}, options)).rejects.toThrow(
        InputValidationError,
      );
      await expect(client.submitMany(Delayed, [{}], options)).rejects.toThrow(InputValidationError);
    }
    expect(await runs()).toBe(before);
  });

  it('at definition: a bad node delay, a bad maxSnoozes, a SnoozeError with a bad delay', () => {
    for (const delayMs of [-1, Number.NaN, MAX_DELAY_MS + 1, '1' as unknown as number]) {
      expect(() => newWorkflow('time_bad', { nodes: { a: { action: Echo, delayMs } } })).toThrow(
        WorkflowDefinitionError,
      );
    }
    for (const maxSnoozes of [-1, 1.5, Number.NaN]) {
      expect(() => newAction('time_bad', async () => null, { maxSnoozes })).toThrow(
        WorkflowDefinitionError,
      );
    }
    for (const ms of [-1, Number.NaN, Number.POSITIVE_INFINITY, MAX_DELAY_MS + 1]) {
      expect(() => new SnoozeError(ms)).toThrow(ConfigError);
    }
    expect(new SnoozeError(1.2).delayMs).toBe(2);
  });
});

describe('many future steps cost the claim nothing it reads', () => {
  it('the claim plan stops at the due end of the claim index, at every priority', async () => {
    // Future-dated steps at the default priority and at a higher one: the claim reads each
    // priority from its due end, so neither is read.
    await client.submitMany(
      Delayed,
      Array.from({ length: 2_000 }, () => ({})),
      { delayMs: 3_600_000 },
    );
    await client.submitMany(
      Delayed,
      Array.from({ length: 2_000 }, () => ({})),
      { delayMs: 3_600_000, priority: 10 },
    );
    const c = new pg.Client({ connectionString: db.url });
    await c.connect();
    try {
      await c.query('ANALYZE cyclone.cyclone_steps');
      await c.query('BEGIN');
      const { rows } = await c.query(`EXPLAIN (ANALYZE, FORMAT JSON) ${claimStepsSql('cyclone')}`, [
        ['time_delayed'],
        10,
        'explain',
        1000,
        ['time_delayed/only'],
      ]);
      await c.query('ROLLBACK');
      const text = JSON.stringify(rows[0]);
      expect(text).toContain('cyclone_steps_claimable');
      // Rows read from the index: the due end only, not the 4,000 future steps.
      const removed = [...text.matchAll(/"Rows Removed by Filter":\s*(\d+)/g)].map((m) =>
        Number(m[1]),
      );
      expect(Math.max(0, ...removed)).toBeLessThan(100);
      const read = [...text.matchAll(/"Actual Rows":\s*(\d+)/g)].map((m) => Number(m[1]));
      expect(Math.max(0, ...read)).toBeLessThan(100);
    } finally {
      await c.end();
    }
    await client.pool.query(
      "DELETE FROM cyclone.cyclone_runs WHERE workflow = 'time_delayed' AND state = 'running'",
    );
  });
});
