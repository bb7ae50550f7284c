/**
 * `ctx.assertLease()` never waits for a connection of the worker's step pool: with a
 * `completionTx` open it checks on that transaction, without one on the worker's control pool.
 * Handlers that hold every step-pool connection in a `completionTx` and then ask "do I still
 * hold the lease?" (before calling a provider, say) must not deadlock the worker; heartbeats
 * would keep such stuck steps leased forever and nothing would rescue them.
 */
import { type Deferred, deferred, waitFor } from '@cyclone/testkit';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Client, newAction, newWorkflow, Worker } from '../src/index.js';
import { createTestDb, type TestDb } from './support/db.js';

const POOL_SIZE = 3;

interface Barrier {
  /** Handlers that open a completionTx and count themselves in. */
  holders: number;
  inTx: number;
  /** Every holder has its completionTx open: the step pool has no free connection. */
  allInTx: Deferred;
  /** The checker's assertLease() returned. */
  checked: Deferred;
}
const fresh = (holders: number): Barrier => ({
  holders,
  inTx: 0,
  allInTx: deferred(),
  checked: deferred(),
});
/** Set by each test before its worker starts. */
let barrier = fresh(0);

/** Counts a handler whose completionTx is open; the last one opens the barrier. */
function arrived(): void {
  barrier.inTx++;
  if (barrier.inTx === barrier.holders) barrier.allInTx.resolve();
}

// Opens its completionTx, writes, waits until every holder has done the same (every
// step-pool connection is then taken), then checks its lease on the transaction.
const payThenAssert = newAction('pay_then_assert', async (ctx) => {
  const tx = await ctx.completionTx();
  await tx.query('INSERT INTO ledger (run_id, node) VALUES ($1, $2)', [ctx.runId, ctx.node]);
  arrived();
  await barrier.allInTx.promise;
  await ctx.assertLease();
  return { ok: true };
});
const PayThenAssert = newWorkflow('pay_then_assert', {
  nodes: { only: { action: payThenAssert } },
});

// Holds a completionTx until the checker has checked its lease.
const holdTx = newAction('hold_tx', async (ctx) => {
  const tx = await ctx.completionTx();
  await tx.query('INSERT INTO ledger (run_id, node) VALUES ($1, $2)', [ctx.runId, ctx.node]);
  arrived();
  await barrier.checked.promise;
  return { held: true };
});
const HoldTx = newWorkflow('hold_tx', { nodes: { only: { action: holdTx } } });

// No completionTx: checks its lease while the holders have every step-pool connection.
const checker = newAction('checker', async (ctx) => {
  await barrier.allInTx.promise;
  await ctx.assertLease();
  barrier.checked.resolve();
  return { checked: true };
});
const Checker = newWorkflow('checker', { nodes: { only: { action: checker } } });

describe('ctx.assertLease() while completionTx transactions hold the step pool', () => {
  let db: TestDb;
  let client: Client;
  const workers: Worker[] = [];

  beforeAll(async () => {
    db = await createTestDb();
    await db.pool.query(
      'CREATE TABLE ledger (run_id uuid NOT NULL, node text NOT NULL, PRIMARY KEY (run_id, node))',
    );
    client = new Client({ connectionString: db.url, poolSize: 4 });
  });

  afterEach(async () => {
    barrier.allInTx.resolve();
    barrier.checked.resolve();
    await Promise.all(workers.splice(0).map((w) => w.stop({ graceMs: 500 }).catch(() => {})));
  });

  afterAll(async () => {
    await client?.close();
    await db?.drop();
  });

  async function allCompleted(runIds: string[]): Promise<boolean> {
    const { rows } = await db.pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM cyclone.cyclone_runs
       WHERE id = ANY($1::uuid[]) AND state = 'completed'`,
      [runIds],
    );
    return rows[0]?.n === runIds.length;
  }

  it('every step-pool connection in a completionTx, each handler checks its lease: all complete', async () => {
    barrier = fresh(POOL_SIZE);
    const runIds: string[] = [];
    for (let i = 0; i < POOL_SIZE; i++) runIds.push((await client.submit(PayThenAssert, {})).runId);
    const worker = new Worker({
      client,
      workflows: [PayThenAssert],
      concurrency: POOL_SIZE,
      poolSize: POOL_SIZE,
      leaseMs: 2_000,
    });
    workers.push(worker);
    await worker.start();

    await waitFor('every run to complete', () => allCompleted(runIds), { timeoutMs: 10_000 });
    // The writes committed with their steps, once each.
    const { rows } = await db.pool.query('SELECT 1 FROM ledger WHERE run_id = ANY($1::uuid[])', [
      runIds,
    ]);
    expect(rows).toHaveLength(POOL_SIZE);
    await waitFor(
      'the worker to count the completions',
      () => worker.stats.completed === POOL_SIZE,
    );
    expect(worker.stats).toMatchObject({ failed: 0, leaseLost: 0 });
  });

  it('without a completionTx, a handler checks its lease while the others hold every step-pool connection', async () => {
    barrier = fresh(POOL_SIZE);
    const holders: string[] = [];
    for (let i = 0; i < POOL_SIZE; i++) holders.push((await client.submit(HoldTx, {})).runId);
    const { runId: checkerRun } = await client.submit(Checker, {});
    const worker = new Worker({
      client,
      workflows: [HoldTx, Checker],
      concurrency: POOL_SIZE + 1,
      poolSize: POOL_SIZE,
      leaseMs: 2_000,
    });
    workers.push(worker);
    await worker.start();

    await waitFor('every run to complete', () => allCompleted([...holders, checkerRun]), {
      timeoutMs: 10_000,
    });
    const run = await client.getRun(checkerRun);
    expect(run.steps[0]).toMatchObject({ state: 'completed', attempt: 1, errors: [] });
  });
});
