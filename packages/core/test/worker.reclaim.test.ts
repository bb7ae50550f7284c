/**
 * A worker re-claims a node whose older attempt is still settling in the same worker: the lease
 * of attempt 1 was lost while the worker lived (a missed heartbeat, then another worker's sweep),
 * or an operator cancelled and retried the run while its handler ran. The two attempts must not
 * evict each other from the worker's in-flight set: when the old one settles, the new one keeps
 * being heartbeated and is not swept and run yet again.
 */
import { type Deferred, deferred, waitFor } from '@cyclone/testkit';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Client, newAction, newWorkflow, Worker } from '../src/index.js';
import { sweepExpiredLeasesSql } from '../src/sql/sweep.js';
import { createTestDb, type TestDb } from './support/db.js';

const Q = '"cyclone"';
const CHANNEL = 'cyclone_cyclone';
const LEASE_MS = 1_500;
const HEARTBEAT_MS = 500;

/** Per `runId:attempt`: the handler started; the test lets it return. */
const started = new Map<string, Deferred>();
const release = new Map<string, Deferred>();
const gate = (m: Map<string, Deferred>, runId: string, attempt: number) => {
  const k = `${runId}:${attempt}`;
  let d = m.get(k);
  if (!d) {
    d = deferred();
    m.set(k, d);
  }
  return d;
};

// Waits for the test without looking at ctx.signal until then, as most handlers do between
// awaits; every attempt runs longer than a lease and relies on heartbeats.
const held = newAction(
  'reclaim_held',
  async (ctx) => {
    gate(started, ctx.runId, ctx.attempt).resolve();
    await gate(release, ctx.runId, ctx.attempt).promise;
    return { attempt: ctx.attempt };
  },
  { maxAttempts: 5, backoff: () => 0 },
);
const Held = newWorkflow('reclaim_held', { nodes: { only: { action: held } } });

interface Row {
  state: string;
  attempt: number;
  lease_ms: number | null;
}

describe('a node re-claimed by the worker still settling its older attempt', () => {
  let db: TestDb;
  let client: Client;
  const workers: Worker[] = [];

  beforeAll(async () => {
    db = await createTestDb();
    client = new Client({ connectionString: db.url, poolSize: 4 });
  });

  // Each test has a worker of its own, stopped after it (passed or not), so it claims alone.
  afterEach(async () => {
    for (const d of release.values()) d.resolve();
    await Promise.all(workers.splice(0).map((w) => w.stop({ graceMs: 1_000 }).catch(() => {})));
  });

  afterAll(async () => {
    await client?.close();
    await db?.drop();
  });

  async function startWorker(): Promise<Worker> {
    const w = new Worker({
      client,
      workflows: [Held],
      concurrency: 4,
      leaseMs: LEASE_MS,
      heartbeatIntervalMs: HEARTBEAT_MS,
      sweepIntervalMs: 200,
      pollIntervalMs: 5_000,
    });
    workers.push(w);
    await w.start();
    return w;
  }

  async function step(runId: string): Promise<Row> {
    const { rows } = await db.pool.query<Row>(
      `SELECT state, attempt, (extract(epoch FROM lease_expires_at) * 1000)::float8 AS lease_ms
       FROM cyclone.cyclone_steps WHERE run_id = $1`,
      [runId],
    );
    return rows[0] as Row;
  }

  async function dbNowMs(): Promise<number> {
    const { rows } = await db.pool.query<{ ms: number }>(
      'SELECT (extract(epoch FROM clock_timestamp()) * 1000)::float8 AS ms',
    );
    return (rows[0] as { ms: number }).ms;
  }

  /**
   * Returns right after the worker's heartbeat extended the lease: the next one is a heartbeat
   * interval away, so what the test does now happens before the worker can notice it.
   */
  async function justAfterHeartbeat(runId: string): Promise<void> {
    const before = (await step(runId)).lease_ms;
    await waitFor('a heartbeat of attempt 1', async () => (await step(runId)).lease_ms !== before, {
      intervalMs: 5,
      timeoutMs: 5_000,
    });
  }

  /**
   * Attempt 2 (held by the test) was claimed by `worker` while attempt 1 was still in flight
   * there. Lets attempt 1 return, waits for it to settle (fenced out or aborted: `leaseLost`),
   * then requires heartbeats to keep attempt 2's lease alive for longer than a lease: without
   * them it would be swept (retryable) and claimed once more (attempt 3).
   */
  async function expectAttempt2KeepsItsLease(worker: Worker, runId: string): Promise<void> {
    gate(release, runId, 1).resolve();
    await waitFor('attempt 1 to settle', () => worker.stats.leaseLost >= 1);
    const settledAt = await dbNowMs();
    const row = await waitFor(
      "attempt 2's lease to be extended past a full lease after attempt 1 settled",
      async () => {
        const s = await step(runId);
        const lost = s.state !== 'running' || s.attempt !== 2;
        return lost || (s.lease_ms ?? 0) > settledAt + 2 * LEASE_MS ? s : undefined;
      },
      { timeoutMs: 10_000 },
    );
    expect(row, 'attempt 2 lost its lease after attempt 1 settled').toMatchObject({
      state: 'running',
      attempt: 2,
    });
    expect(worker.running).toBe(1);

    gate(release, runId, 2).resolve();
    const run = await client.waitForRun(runId, { timeoutMs: 10_000 });
    expect(run.state).toBe('completed');
    expect(run.steps[0]).toMatchObject({ state: 'completed', attempt: 2, output: { attempt: 2 } });
    await waitFor('the worker to have nothing in flight', () => worker.running === 0);
  }

  it('lease lost while the worker lives (a missed heartbeat, then a sweep): the re-claimed attempt keeps its lease', async () => {
    const worker = await startWorker();
    const { runId } = await client.submit(Held, {});
    await gate(started, runId, 1).promise;

    // Attempt 1 missed a heartbeat (a GC pause, a network blip) and another worker's sweep ran.
    await justAfterHeartbeat(runId);
    const c = await db.pool.connect();
    let swept: { state: string; attempt: number }[];
    try {
      await c.query('BEGIN');
      await c.query(
        `UPDATE cyclone.cyclone_steps SET lease_expires_at = now() - interval '1 ms'
         WHERE run_id = $1`,
        [runId],
      );
      ({ rows: swept } = await c.query(sweepExpiredLeasesSql(Q), [100, CHANNEL]));
      await c.query('COMMIT');
    } finally {
      c.release();
    }
    expect(swept.map((r) => [r.state, r.attempt])).toEqual([['retryable', 1]]);

    // The same worker (the only one) re-claims the node while attempt 1 is still in flight.
    await gate(started, runId, 2).promise;
    await expectAttempt2KeepsItsLease(worker, runId);
    const run = await client.getRun(runId);
    expect(run.steps[0]?.errors.map((e) => [e.attempt, e.kind])).toEqual([[1, 'lease_expired']]);
  });

  it('run cancelled and retried while its handler runs: the re-claimed attempt keeps its lease', async () => {
    const worker = await startWorker();
    const { runId } = await client.submit(Held, {});
    await gate(started, runId, 1).promise;

    await justAfterHeartbeat(runId);
    await client.cancel(runId);
    expect(await client.retryAll(runId)).toEqual(['only']);

    await gate(started, runId, 2).promise;
    await expectAttempt2KeepsItsLease(worker, runId);
    const run = await client.getRun(runId);
    expect(run.steps[0]?.errors).toEqual([]);
  });
});
