/**
 * Operator actions never deadlock with workers. A worker's completion and failure lock step rows,
 * then the run row; `cancel`, `retry` and `retryAll` used to lock the run row, then its steps, so
 * an operator racing a worker on the same run could wait for each other in a cycle (PostgreSQL
 * aborted one of them with 40P01 after deadlock_timeout; both sides retried, so nothing was lost,
 * but every deadlock stalled both for a second and the worker logged it). Measured with the
 * server's own deadlock counter for the test database and the worker's log.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, InvalidStateError, newAction, newWorkflow, Worker } from '../src/index.js';
import { createTestDb, deadlockCount, type TestDb } from './support/db.js';
import { captureLogger } from './support/logger.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

// Fails every attempt (retryable, tiny backoff): its last attempt is discarded, which moves the
// run's counters in the failure statement (step row, then run row).
const failing = newAction(
  'oplock_failing',
  async () => {
    throw new Error('always fails');
  },
  { maxAttempts: 2, backoff: () => 1 },
);
const ok = newAction('oplock_ok', async () => ({}));

// Downstream nodes sort before their upstream ('a…' after 'z…'), so an order by node name alone
// is not the order in which a completion locks a run's rows.
const Failing = newWorkflow('oplock_fail', {
  nodes: {
    z_root: { action: ok },
    y_fail: { action: failing, after: ['z_root'] },
    x_fail: { action: failing, after: ['z_root'] },
    a_join: { action: ok, after: ['y_fail', 'x_fail'] },
  },
});
const Completing = newWorkflow('oplock_ok', {
  nodes: {
    z_root: { action: ok },
    m1: { action: ok, after: ['z_root'] },
    m2: { action: ok, after: ['z_root'] },
    m3: { action: ok, after: ['z_root'] },
    a_join: { action: ok, after: ['m1', 'm2', 'm3'] },
  },
});

// A fan-out whose steps are claimed and completed hundreds a second: some step row is nearly
// always held by a claim, a completion batch or a heartbeat for a moment.
const slow = newAction('oplock_slow', async () => ({}));
const fanNodes: Record<string, { action: typeof slow; after?: string[] }> = {
  root: { action: slow },
};
for (let i = 0; i < 5_000; i++)
  fanNodes[`n${String(i).padStart(4, '0')}`] = { action: slow, after: ['root'] };
const BusyFan = newWorkflow('oplock_busy_fan', { nodes: fanNodes });

describe('operator lock order', () => {
  let db: TestDb;
  let client: Client;

  beforeAll(async () => {
    db = await createTestDb();
    client = new Client({ connectionString: db.url, poolSize: 8 });
  });
  afterAll(async () => {
    await client?.close();
    await db?.drop();
  });

  it('cancel, retry and retryAll racing failing and completing workers: no deadlock, consistent end state', async () => {
    const deadlocks = () => deadlockCount(db.pool);
    const before = await deadlocks();
    const failingRuns = (
      await client.submitMany(
        Failing,
        Array.from({ length: 12 }, () => ({})),
      )
    ).runIds;
    const completingRuns = (
      await client.submitMany(
        Completing,
        Array.from({ length: 12 }, () => ({})),
      )
    ).runIds;
    const log = captureLogger();
    const workers = [1, 2].map(
      () =>
        new Worker({
          client,
          workflows: [Failing, Completing],
          concurrency: 16,
          pollIntervalMs: 5,
          logger: log.logger,
        }),
    );
    for (const w of workers) await w.start();
    const errors: unknown[] = [];
    let ops = 0;
    // Only a refusal of the action itself is expected (cancelling a completed run, a retry that
    // finds nothing to reopen or nothing that can progress); anything else fails the test.
    const call = async (p: Promise<unknown>) => {
      ops++;
      try {
        await p;
      } catch (err) {
        if (!(err instanceof InvalidStateError)) errors.push(err);
      }
    };
    const until = Date.now() + 6_000;
    const operator = async (runId: string, i: number) => {
      const node = failingRuns.includes(runId) ? 'y_fail' : 'm1';
      while (Date.now() < until) {
        await call(i % 2 === 0 ? client.retryAll(runId) : client.retry(runId, node));
        await sleep(Math.random() * 4);
        await call(client.cancel(runId));
        await sleep(Math.random() * 2);
        await call(client.retryAll(runId));
        await sleep(Math.random() * 6);
      }
    };
    try {
      // The completing runs are reopened by retryAll after a cancel, so they race too.
      await Promise.all([...failingRuns, ...completingRuns].map((id, i) => operator(id, i)));
      // The end: every run cancelled (or, for a completing run, completed), whatever the workers do.
      for (const id of [...failingRuns, ...completingRuns]) await call(client.cancel(id));
      await sleep(200);
    } finally {
      for (const w of workers) await w.stop({ graceMs: 5_000 });
    }
    expect(errors.map(String)).toEqual([]);
    // The race was run: about 1,000 operator calls in 6 s on a 2-core machine.
    expect(ops).toBeGreaterThan(200);

    const runs = await db.pool.query<{
      id: string;
      workflow: string;
      state: string;
      steps_active: number;
      steps_remaining: number;
      not_done: number;
      unfinished: number;
    }>(
      `SELECT r.id, r.workflow, r.state, r.steps_active, r.steps_remaining,
              count(*) FILTER (WHERE s.state NOT IN ('completed', 'skipped'))::int AS not_done,
              count(*) FILTER (WHERE s.state IN ('pending', 'available', 'scheduled', 'running',
                                                'retryable'))::int AS unfinished
       FROM cyclone.cyclone_runs r JOIN cyclone.cyclone_steps s ON s.run_id = r.id
       GROUP BY r.id`,
    );
    expect(runs.rows).toHaveLength(24);
    for (const r of runs.rows) {
      if (r.workflow === 'oplock_fail') expect(r.state).toBe('cancelled');
      else expect(['cancelled', 'completed']).toContain(r.state);
      expect(r.steps_active).toBe(0);
      expect(r.unfinished).toBe(0);
      expect(r.steps_remaining).toBe(r.not_done);
      if (r.state === 'completed') expect(r.not_done).toBe(0);
    }
    // A failing run's steps: the root completed, the rest cancelled or discarded.
    const states = await db.pool.query<{ node: string; state: string }>(
      `SELECT DISTINCT node, state FROM cyclone.cyclone_steps WHERE workflow = 'oplock_fail'`,
    );
    for (const s of states.rows) {
      expect(s.node === 'z_root' ? ['completed'] : ['cancelled', 'discarded']).toContain(s.state);
    }

    const conflicts = log
      .text()
      .split('\n')
      // "failure not recorded: the lease was already lost" is not one: a cancel fences out the
      // attempt it cancels.
      .filter((l) => /deadlock|could not record/i.test(l));
    expect(conflicts).toEqual([]);
    // The server counts a deadlock when it detects it; its statistics reach pg_stat_database
    // when the backend reports them (at the latest when it exits: the workers' pools are closed).
    await sleep(1_500);
    expect((await deadlocks()) - before).toBe(0);
  }, 60_000);

  // The interleavings one at a time: another transaction holds one row of the run and locks a
  // second one after the operator action has begun. The first is the worker's order (a cancel
  // holding the run row used to deadlock with it); the second a signal's, which an operator
  // action taking the step rows first and waiting for the run row would deadlock with.
  const racing = async (
    first: string,
    second: string,
  ): Promise<{ run: string; other: unknown; action: unknown }> => {
    const { runId } = await client.submit(Failing, {});
    const c = await db.pool.connect();
    try {
      await c.query('BEGIN');
      // This side checks for a deadlock first, so that it, not the operator's transaction (which
      // is run again unseen), is the one aborted if there is one.
      await c.query("SET LOCAL deadlock_timeout = '50ms'");
      await c.query(first, [runId]);
      const action = client.cancel(runId).then(
        () => 'ok',
        (err: unknown) => err,
      );
      await sleep(300);
      const other = await c.query(second, [runId]).then(
        async () => {
          await c.query('COMMIT');
          return 'ok';
        },
        async (err: unknown) => {
          await c.query('ROLLBACK');
          return String(err);
        },
      );
      const done = await action;
      return { run: (await client.getRun(runId)).state, other, action: done };
    } finally {
      c.release();
    }
  };

  it('cancel of a busy fan-out (5,000 no-op steps, 2 workers × 100) gets in while it runs', async () => {
    // Taking every row at once (SKIP LOCKED) would wait for an instant with all 5,001 rows free,
    // which a busy run may not offer before it ends; the action then waits for each in turn.
    const workers = [1, 2].map(
      () => new Worker({ client, workflows: [BusyFan], concurrency: 100, pollIntervalMs: 50 }),
    );
    try {
      for (const w of workers) await w.start();
      const { runId } = await client.submit(BusyFan, {});
      // Until the fan-out is under way: root done, its nodes being claimed and completed.
      for (let i = 0; i < 200; i++) {
        const { rows } = await db.pool.query<{ n: number }>(
          "SELECT count(*)::int AS n FROM cyclone.cyclone_steps WHERE run_id = $1 AND state = 'completed'",
          [runId],
        );
        if ((rows[0]?.n ?? 0) >= 300) break;
        await sleep(25);
      }
      const t0 = Date.now();
      await client.cancel(runId);
      const tookMs = Date.now() - t0;
      const run = await client.getRun(runId);
      expect(run.state).toBe('cancelled');
      const cancelled = run.steps.filter((s) => s.state === 'cancelled').length;
      // It came before the end: the run was not completed under it (InvalidStateError).
      expect(cancelled).toBeGreaterThan(0);
      expect(tookMs).toBeLessThan(5_000);
      const { rows } = await db.pool.query<{ active: number; remaining: number; open: number }>(
        `SELECT r.steps_active AS active, r.steps_remaining AS remaining,
                (SELECT count(*)::int FROM cyclone.cyclone_steps s
                 WHERE s.run_id = r.id AND s.state NOT IN ('completed', 'skipped')) AS open
         FROM cyclone.cyclone_runs r WHERE r.id = $1`,
        [runId],
      );
      expect(rows[0]).toEqual({ active: 0, remaining: rows[0]?.open, open: rows[0]?.open });
    } finally {
      for (const w of workers) await w.stop({ graceMs: 5_000 });
    }
  });

  it("a worker's order (a step row, then the run row) racing a cancel: both go through", async () => {
    const got = await racing(
      "SELECT 1 FROM cyclone.cyclone_steps WHERE run_id = $1 AND node = 'x_fail' FOR UPDATE",
      'UPDATE cyclone.cyclone_runs SET updated_at = now() WHERE id = $1',
    );
    expect(got).toEqual({ run: 'cancelled', other: 'ok', action: 'ok' });
  });

  it("a signal's order (the run row KEY SHARE, then a step row) racing a cancel: both go through", async () => {
    const got = await racing(
      'SELECT 1 FROM cyclone.cyclone_runs WHERE id = $1 FOR KEY SHARE',
      "SELECT 1 FROM cyclone.cyclone_steps WHERE run_id = $1 AND node = 'x_fail' FOR UPDATE",
    );
    expect(got).toEqual({ run: 'cancelled', other: 'ok', action: 'ok' });
  });
});
