/**
 * `stop({ graceMs })` is bounded by its grace period, and what it cuts short costs nothing:
 * - a claim statement blocked behind a lock (a migration, VACUUM FULL, a pg_repack swap) does
 *   not hold stop() past graceMs, nor does closing the pool that statement's connection is in;
 *   and once the lock goes, that statement claims nothing for the stopped worker;
 * - stop() called while start() is still connecting leaves no connection behind;
 * - an attempt aborted because the grace period ran out gives its attempt back, so a routine
 *   deploy never uses up (and discards) a step with few attempts.
 */
import { deferred, waitFor } from '@cyclone/testkit';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Client, newAction, newWorkflow, type StepInfo, Worker } from '../src/index.js';
import { createTestDb, type TestDb } from './support/db.js';

const quick = newAction('stop_quick', async () => null);
const Quick = newWorkflow('stop_quick', { nodes: { only: { action: quick } } });

// Attempt 1 ignores ctx.signal and never ends by itself; later attempts return at once.
const stuckStarted = deferred();
const stuckForever = deferred();
const stuck = newAction(
  'stop_stuck',
  async (ctx) => {
    if (ctx.attempt === 1) {
      stuckStarted.resolve();
      await stuckForever.promise;
    }
    return { attempt: ctx.attempt };
  },
  { maxAttempts: 1 },
);
const Stuck = newWorkflow('stop_stuck', { nodes: { only: { action: stuck } } });

let lateRuns = 0;
const late = newAction('stop_late', async () => {
  lateRuns++;
  return null;
});
const Late = newWorkflow('stop_late', { nodes: { only: { action: late } } });

describe('Worker.stop() bounded by its grace period', () => {
  let db: TestDb;
  let client: Client;
  const workers: Worker[] = [];
  const track = (w: Worker) => {
    workers.push(w);
    return w;
  };

  beforeAll(async () => {
    db = await createTestDb();
    client = new Client({ connectionString: db.url, poolSize: 4 });
  });

  afterEach(async () => {
    await Promise.all(workers.splice(0).map((w) => w.stop({ graceMs: 500 }).catch(() => {})));
  });

  afterAll(async () => {
    stuckForever.resolve();
    await client?.close();
    await db?.drop();
  });

  /** Starts `stop()` and returns a flag that turns true once it resolved. */
  function stopping(w: Worker, graceMs: number) {
    const state = { done: false, promise: Promise.resolve() };
    state.promise = w.stop({ graceMs }).then(() => {
      state.done = true;
    });
    return state;
  }

  it('returns within the grace period while its claim statement waits behind a table lock', async () => {
    const worker = track(
      new Worker({ client, workflows: [Quick], pollIntervalMs: 50, sweepIntervalMs: 60_000 }),
    );
    await worker.start();
    // The claim loop keeps polling; an operator takes an ACCESS EXCLUSIVE lock on the steps.
    const admin = await db.pool.connect();
    let stop: ReturnType<typeof stopping> | undefined;
    try {
      await admin.query('BEGIN');
      await admin.query('LOCK TABLE cyclone.cyclone_steps IN ACCESS EXCLUSIVE MODE');
      await waitFor('a claim statement blocked on the lock', async () => {
        const { rows } = await db.pool.query(
          `SELECT 1 FROM pg_stat_activity
           WHERE datname = current_database() AND wait_event_type = 'Lock'
             AND query LIKE '%FOR UPDATE SKIP LOCKED%'`,
        );
        return rows.length > 0;
      });

      stop = stopping(worker, 300);
      // graceMs, then at most a second to close the pools: far less than this.
      // The lock is held until `finally`: stop() must not wait for it.
      await waitFor('stop() to return while the lock is held', () => stop?.done, {
        timeoutMs: 5_000,
      });
    } finally {
      await admin.query('ROLLBACK').catch(() => {});
      admin.release();
      await stop?.promise;
    }
  });

  it('a claim statement still blocked when stop() returned claims nothing once the lock goes', async () => {
    const worker = track(
      new Worker({
        client,
        workflows: [Late],
        listen: false,
        pollIntervalMs: 50,
        sweepIntervalMs: 60_000,
      }),
    );
    await worker.start();
    const admin = await db.pool.connect();
    let runId = '';
    let stop: ReturnType<typeof stopping> | undefined;
    let committed = false;
    try {
      await admin.query('BEGIN');
      // EXCLUSIVE blocks the claim (its UPDATE and FOR UPDATE) and lets plain reads through.
      await admin.query('LOCK TABLE cyclone.cyclone_steps IN EXCLUSIVE MODE');
      // A run that becomes visible when the lock goes: the blocked claim will see it.
      ({ runId } = await client.submit(Late, {}, { tx: admin }));
      await waitFor('a claim statement blocked on the lock', async () => {
        const { rows } = await db.pool.query(
          `SELECT 1 FROM pg_stat_activity
           WHERE datname = current_database() AND wait_event_type = 'Lock'
             AND query LIKE '%FOR UPDATE SKIP LOCKED%'`,
        );
        return rows.length > 0;
      });
      stop = stopping(worker, 300);
      await waitFor('stop() to return while the lock is held', () => stop?.done, {
        timeoutMs: 5_000,
      });
      await admin.query('COMMIT');
      committed = true;
    } finally {
      if (!committed) await admin.query('ROLLBACK').catch(() => {});
      admin.release();
      await stop?.promise;
    }

    await waitFor('the blocked claim statement to end', async () => {
      const { rows } = await db.pool.query(
        `SELECT 1 FROM pg_stat_activity
         WHERE datname = current_database() AND state = 'active' AND pid <> pg_backend_pid()
           AND query LIKE '%FOR UPDATE SKIP LOCKED%'`,
      );
      return rows.length === 0;
    });
    // The worker is stopped: it must not run the handler, nor keep the step leased.
    expect(lateRuns, 'handler runs in the stopped worker').toBe(0);
    const step = (await client.getRun(runId)).steps[0] as StepInfo;
    expect(step.state, 'the step is not held by the stopped worker').not.toBe('running');
    // Another worker takes it at once, not after the lease of a claim nobody works on.
    const next = track(new Worker({ client, workflows: [Late], pollIntervalMs: 50 }));
    await next.start();
    expect((await client.waitForRun(runId, { timeoutMs: 10_000 })).state).toBe('completed');
    expect(lateRuns).toBe(1);
  });

  it('stop() called while start() is still connecting leaves no LISTEN connection open', async () => {
    const worker = track(new Worker({ client, workflows: [Quick] }));
    const starting = worker.start();
    await worker.stop({ graceMs: 300 });
    // start() resolves once its LISTEN connection is connected and listening (or given up).
    await starting;
    const { rows } = await db.pool.query(
      `SELECT pid FROM pg_stat_activity
       WHERE datname = current_database() AND query ILIKE 'LISTEN%' AND pid <> pg_backend_pid()`,
    );
    // An open one would also keep the process from exiting.
    expect(rows, 'LISTEN connections of the stopped worker').toEqual([]);
  });

  it('an attempt aborted when the grace period ran out gives its attempt back, and runs again elsewhere', async () => {
    const first = track(new Worker({ client, workflows: [Stuck], pollIntervalMs: 50 }));
    await first.start();
    const { runId } = await client.submit(Stuck, {});
    await stuckStarted.promise;
    await first.stop({ graceMs: 200 });

    // maxAttempts is 1: had the cut-short attempt counted, the step would be discarded.
    const run = await client.getRun(runId);
    expect(run.state).toBe('running');
    const step = run.steps[0] as StepInfo;
    expect(step).toMatchObject({ state: 'retryable', attempt: 1, maxAttempts: 2 });
    expect(step.errors.map((e) => [e.attempt, e.kind])).toEqual([[1, 'worker_stopped']]);

    const second = track(new Worker({ client, workflows: [Stuck], pollIntervalMs: 50 }));
    await second.start();
    const done = await client.waitForRun(runId, { timeoutMs: 10_000 });
    expect(done.state).toBe('completed');
    expect(done.steps[0]).toMatchObject({ state: 'completed', attempt: 2, output: { attempt: 2 } });
  });
});
