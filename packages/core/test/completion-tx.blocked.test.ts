/**
 * A handler's `completionTx` query is blocked (a row or table lock held elsewhere, a slow
 * statement) when its attempt ends — by the action's timeout or by the worker's stop. The
 * blocked statement is cancelled and its connection dropped (the server rolls the transaction
 * back), so the outcome is recorded at once and the slot, the connection and stop() are not
 * held until the lock goes away. Run directly and through PgBouncer (vitest.pgbouncer.config.ts),
 * where the connection's process id is PgBouncer's, not the server backend's.
 */
import {
  deferred,
  engineClientOptions,
  engineUrl,
  engineWorkerOptions,
  waitFor,
} from '@cyclone/testkit';
import type pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Client, newAction, newWorkflow, type StepInfo, Worker } from '../src/index.js';
import { createTestDb, type TestDb } from './support/db.js';

const entered = { timeout: deferred(), stop: deferred() };

/** Opens its completionTx and reads `blocker`, which the test keeps locked. */
function blockedAction(name: 'timeout' | 'stop', timeout?: number) {
  return newAction(
    `blocked_${name}`,
    async (ctx) => {
      const tx = await ctx.completionTx();
      entered[name].resolve();
      await tx.query('SELECT count(*) FROM blocker');
      return { unblocked: true };
    },
    { maxAttempts: 1, timeout },
  );
}
const BlockedTimeout = newWorkflow('blocked_timeout', {
  nodes: { only: { action: blockedAction('timeout', 300) } },
});
const BlockedStop = newWorkflow('blocked_stop', {
  nodes: { only: { action: blockedAction('stop') } },
});

describe('an attempt that ends while its completionTx query is blocked', () => {
  let db: TestDb;
  let client: Client;
  let admin: pg.PoolClient | undefined;
  const workers: Worker[] = [];

  beforeAll(async () => {
    db = await createTestDb();
    await db.pool.query('CREATE TABLE blocker (id int)');
    client = new Client({
      connectionString: engineUrl(db.url),
      poolSize: 4,
      ...engineClientOptions,
    });
  });

  afterEach(async () => {
    await unlock();
    await Promise.all(workers.splice(0).map((w) => w.stop({ graceMs: 500 }).catch(() => {})));
  });

  afterAll(async () => {
    await client?.close();
    await db?.drop();
  });

  /** Holds an ACCESS EXCLUSIVE lock on `blocker` until `unlock()`. */
  async function lockBlocker(): Promise<void> {
    admin = await db.pool.connect();
    await admin.query('BEGIN');
    await admin.query('LOCK TABLE blocker IN ACCESS EXCLUSIVE MODE');
  }

  async function unlock(): Promise<void> {
    const c = admin;
    admin = undefined;
    if (!c) return;
    await c.query('ROLLBACK').catch(() => {});
    c.release();
  }

  /** Backends of this database waiting for a lock (the handler's blocked query). */
  async function lockWaiters(): Promise<number> {
    const { rows } = await db.pool.query(
      `SELECT 1 FROM pg_stat_activity
       WHERE datname = current_database() AND wait_event_type = 'Lock'`,
    );
    return rows.length;
  }

  async function stepIn(runId: string, state: string): Promise<StepInfo> {
    const s = (await client.getRun(runId)).steps[0] as StepInfo;
    if (s.state !== state) throw new Error(`the step is ${s.state} at attempt ${s.attempt}`);
    return s;
  }

  it('on timeout: the timeout is recorded at once and the blocked query cancelled', async () => {
    await lockBlocker();
    const worker = new Worker({
      client,
      workflows: [BlockedTimeout],
      leaseMs: 30_000,
      ...engineWorkerOptions,
    });
    workers.push(worker);
    await worker.start();
    const { runId } = await client.submit(BlockedTimeout, {});
    await entered.timeout.promise;

    // The lock is still held: only the cancellation can end the attempt.
    const step = await waitFor('the timeout to be recorded', () => stepIn(runId, 'discarded'), {
      timeoutMs: 5_000,
    });
    expect(step.errors.map((e) => [e.attempt, e.kind])).toEqual([[1, 'timeout']]);
    expect((await client.getRun(runId)).state).toBe('failed');
    await waitFor('the blocked query to be gone', async () => (await lockWaiters()) === 0);
    await waitFor('the slot to be free', () => worker.running === 0);
  });

  it('on stop: stop() returns within its grace period and the blocked query is cancelled', async () => {
    await lockBlocker();
    const worker = new Worker({
      client,
      workflows: [BlockedStop],
      leaseMs: 30_000,
      ...engineWorkerOptions,
    });
    workers.push(worker);
    await worker.start();
    const { runId } = await client.submit(BlockedStop, {});
    await entered.stop.promise;
    await waitFor('the handler query to wait on the lock', async () => (await lockWaiters()) > 0);

    let stopped = false;
    const stopping = worker.stop({ graceMs: 300 }).then(() => {
      stopped = true;
    });
    try {
      await waitFor('stop() to return while the lock is held', () => stopped, { timeoutMs: 5_000 });
      // Still locked: only the cancellation ends the handler's query on the server.
      await waitFor('the blocked query to be gone', async () => (await lockWaiters()) === 0, {
        timeoutMs: 5_000,
      });
    } finally {
      await unlock();
      await stopping;
    }
    const step = await stepIn(runId, 'retryable');
    // Cut short by the stop: recorded, and the attempt given back.
    expect(step).toMatchObject({ attempt: 1, maxAttempts: 2 });
    expect(step.errors.map((e) => [e.attempt, e.kind])).toEqual([[1, 'worker_stopped']]);
  });
});
