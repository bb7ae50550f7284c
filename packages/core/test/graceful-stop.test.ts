/**
 * Worker lifecycle: `stop()` lets in-flight handlers finish and claims nothing new; past the
 * grace period it aborts them and the step runs again elsewhere. Pickup works without LISTEN
 * (polling) and survives a killed LISTEN connection.
 */
import { deferred, waitFor } from '@cyclone/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, newAction, newWorkflow, Worker } from '../src/index.js';
import { createTestDb, type TestDb } from './support/db.js';

// Held: handlers wait for a gate; signal state recorded when released.
const heldGate = deferred();
const held = { started: 0, finished: 0, abortedAtRelease: [] as boolean[] };
const heldAction = newAction('held', async (ctx) => {
  held.started++;
  await heldGate.promise;
  held.abortedAtRelease.push(ctx.signal.aborted);
  held.finished++;
  return { node: ctx.node };
});
const Held = newWorkflow('held', { nodes: { only: { action: heldAction } } });

// Stuck: attempt 1 never finishes on its own (it ignores everything); later attempts are quick.
const stuck = { started: deferred(), signal: undefined as AbortSignal | undefined };
const stuckAction = newAction(
  'stuck',
  async (ctx) => {
    if (ctx.attempt === 1) {
      stuck.signal = ctx.signal;
      stuck.started.resolve();
      await new Promise(() => {});
    }
    return { attempt: ctx.attempt };
  },
  { backoff: () => 0 },
);
const Stuck = newWorkflow('stuck', { nodes: { only: { action: stuckAction } } });

const quick = newAction('quick', async (ctx) => ({ node: ctx.node }));
const Polled = newWorkflow('polled', { nodes: { only: { action: quick } } });
const Notified = newWorkflow('notified', { nodes: { only: { action: quick } } });

describe('graceful stop and pickup', () => {
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

  afterAll(async () => {
    heldGate.resolve();
    await Promise.all(workers.map((w) => w.stop({ graceMs: 500 }).catch(() => {})));
    await client?.close();
    await db?.drop();
  });

  async function stepOf(runId: string) {
    return (await client.getRun(runId)).steps[0];
  }

  it('stop() lets in-flight handlers finish and claims nothing new', async () => {
    const worker = track(
      new Worker({ client, workflows: [Held], concurrency: 5, pollIntervalMs: 50 }),
    );
    await worker.start();
    const first = await Promise.all([1, 2, 3].map(() => client.submit(Held, {})));
    await waitFor('3 handlers to start', () => held.started === 3);

    // Two slots are free: a worker that kept claiming would take the runs submitted now.
    const stopping = worker.stop({ graceMs: 30_000 });
    const later = await Promise.all([1, 2, 3].map(() => client.submit(Held, {})));
    for (const { runId } of first) expect((await stepOf(runId))?.state).toBe('running');
    heldGate.resolve();
    await stopping;

    expect(held.finished).toBe(3);
    expect(held.abortedAtRelease).toEqual([false, false, false]);
    for (const { runId } of first) {
      const run = await client.getRun(runId);
      expect(run.state).toBe('completed');
      expect(run.steps[0]).toMatchObject({ state: 'completed', attempt: 1 });
    }
    for (const { runId } of later) {
      expect(await stepOf(runId)).toMatchObject({
        state: 'available',
        attempt: 0,
        leaseOwner: null,
      });
    }
    expect(held.started).toBe(3);

    // A new worker takes them over.
    const next = track(
      new Worker({ client, workflows: [Held], concurrency: 5, pollIntervalMs: 50 }),
    );
    await next.start();
    for (const { runId } of later) {
      expect((await client.waitForRun(runId, { timeoutMs: 20_000 })).state).toBe('completed');
    }
    expect(held.started).toBe(6);
    await next.stop();
  });

  it('past the grace period stop() aborts the handler, and the step runs again elsewhere', async () => {
    const worker = track(
      new Worker({
        client,
        workflows: [Stuck],
        concurrency: 2,
        leaseMs: 1_000,
        pollIntervalMs: 50,
      }),
    );
    await worker.start();
    const { runId } = await client.submit(Stuck, {});
    await stuck.started.promise;
    await worker.stop({ graceMs: 200 });
    expect(stuck.signal?.aborted).toBe(true);
    expect((await stepOf(runId))?.state).not.toBe('completed');

    const rescuer = track(
      new Worker({
        client,
        workflows: [Stuck],
        concurrency: 2,
        sweepIntervalMs: 100,
        pollIntervalMs: 50,
      }),
    );
    await rescuer.start();
    const run = await client.waitForRun(runId, { timeoutMs: 20_000 });
    expect(run.state).toBe('completed');
    expect(run.steps[0]).toMatchObject({ state: 'completed', attempt: 2, output: { attempt: 2 } });
    expect(run.steps[0]?.errors.map((e) => e.attempt)).toEqual([1]);
    await rescuer.stop();
  });

  it('without LISTEN, polling picks up new runs', async () => {
    const worker = track(
      new Worker({ client, workflows: [Polled], listen: false, pollIntervalMs: 200 }),
    );
    await worker.start();
    // The other tests' workers are stopped: no connection of this database listens.
    const { rows } = await db.pool.query(
      `SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND query ILIKE 'LISTEN%'`,
    );
    expect(rows).toHaveLength(0);
    for (let i = 0; i < 3; i++) {
      const { runId } = await client.submit(Polled, { i });
      expect((await client.waitForRun(runId, { timeoutMs: 20_000 })).state).toBe('completed');
    }
    await worker.stop();
  });

  it('a run submitted while the LISTEN connection is down is still picked up, and LISTEN comes back', async () => {
    const worker = track(new Worker({ client, workflows: [Notified], pollIntervalMs: 5_000 }));
    await worker.start();
    const listenPids = async () => {
      const { rows } = await db.pool.query<{ pid: number }>(
        `SELECT pid FROM pg_stat_activity
         WHERE datname = current_database() AND query ILIKE 'LISTEN%cyclone_cyclone%'`,
      );
      return rows.map((r) => r.pid);
    };
    const [pid] = await waitFor('the LISTEN connection', async () => {
      const p = await listenPids();
      return p.length === 1 ? p : undefined;
    });
    // Through NOTIFY first.
    const { runId: viaNotify } = await client.submit(Notified, { n: 1 });
    expect((await client.waitForRun(viaNotify, { timeoutMs: 20_000 })).state).toBe('completed');

    await db.pool.query('SELECT pg_terminate_backend($1)', [pid]);
    const { runId } = await client.submit(Notified, { n: 2 });
    expect((await client.waitForRun(runId, { timeoutMs: 20_000 })).state).toBe('completed');
    await waitFor('a new LISTEN connection', async () => {
      const p = await listenPids();
      return p.length === 1 && p[0] !== pid;
    });
    // And NOTIFY works again.
    const { runId: again } = await client.submit(Notified, { n: 3 });
    expect((await client.waitForRun(again, { timeoutMs: 20_000 })).state).toBe('completed');
  });
});
