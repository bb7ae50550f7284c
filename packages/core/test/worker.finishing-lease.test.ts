/**
 * A step whose handler returned keeps its lease while its outcome waits to be recorded (a
 * completion batch blocked on a lock, or waiting for a step-pool connection that handlers hold
 * with open completionTx): the heartbeat extends it, so no other worker runs it again while its
 * worker is alive (break test of issue 8's changes: with the heartbeat skipping finishing steps
 * and a short lease, such a step was swept and ran twice). Also: worker stats count a step
 * fenced out of a batch as lost, not completed, even when the batch holds the same node twice.
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, newAction, newWorkflow, Worker } from '../src/index.js';
import { createTestDb, type TestDb } from './support/db.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** Short lease and sweep, so a lease left unextended would be lost within the test. */
const FAST = { leaseMs: 1_500, sweepIntervalMs: 200 } as const;

const executions = new Map<string, number>();
const count = (key: string) => executions.set(key, (executions.get(key) ?? 0) + 1);

const tagged = newAction('fin_tagged', async (_ctx, input: { tag: string }) => {
  count(input.tag);
  if (input.tag === 'B') await sleep(300); // settles while A's completion is blocked
  return { tag: input.tag };
});
const Tagged = newWorkflow<{ tag: string }>('fin_tagged', { nodes: { a: { action: tagged } } });

const holder = newAction('fin_hold', async (ctx) => {
  const tx = await ctx.completionTx();
  await tx.query('SELECT 1');
  await sleep(4_000);
  return { held: true };
});
const quick = newAction('fin_quick', async (ctx) => {
  count(ctx.runId);
  return { quick: true };
});
const Hold = newWorkflow('fin_hold', { nodes: { a: { action: holder } } });
const Quick = newWorkflow('fin_quick', { nodes: { a: { action: quick } } });

describe('finishing steps keep their lease', () => {
  let db: TestDb;
  let client: Client;

  beforeAll(async () => {
    db = await createTestDb();
    client = new Client({ connectionString: db.url, poolSize: 4 });
  });
  afterAll(async () => {
    await client?.close();
    await db?.drop();
  });

  it('a step queued behind a completion blocked on a lock is not run again', async () => {
    const a = await client.submit(Tagged, { tag: 'A' });
    // An outside transaction holds A's run row: A's completion statement blocks on it.
    const locker = new pg.Client({ connectionString: db.url });
    await locker.connect();
    await locker.query('BEGIN');
    await locker.query('SELECT 1 FROM cyclone.cyclone_runs WHERE id = $1 FOR UPDATE', [a.runId]);
    const b = await client.submit(Tagged, { tag: 'B' });
    const w1 = new Worker({ client, workflows: [Tagged], concurrency: 4, ...FAST });
    const w2 = new Worker({ client, workflows: [Tagged], concurrency: 4, ...FAST });
    await w1.start();
    await sleep(300);
    await w2.start();
    try {
      await sleep(4_000); // well past the 1.5 s lease
      await locker.query('COMMIT');
      const rb = await client.waitForRun(b.runId, { timeoutMs: 20_000 });
      const ra = await client.waitForRun(a.runId, { timeoutMs: 20_000 });
      expect(ra.state).toBe('completed');
      expect(rb.state).toBe('completed');
      expect(executions.get('A')).toBe(1);
      expect(executions.get('B')).toBe(1);
      expect(rb.steps[0]?.errors).toEqual([]);
      expect(w1.stats.leaseLost + w2.stats.leaseLost).toBe(0);
      expect(w1.stats.swept + w2.stats.swept).toBe(0);
    } finally {
      await locker.end().catch(() => {});
      await w1.stop({ graceMs: 2_000 });
      await w2.stop({ graceMs: 2_000 });
    }
  });

  it('steps waiting for a step-pool connection held by completionTx handlers are not run again', async () => {
    await client.submitMany(
      Hold,
      Array.from({ length: 4 }, () => ({})),
    );
    const { runIds } = await client.submitMany(
      Quick,
      Array.from({ length: 6 }, () => ({})),
    );
    // Step pool of 4: the 4 holders take every connection for 4 s; the quick steps' batched
    // completion waits for one.
    const w1 = new Worker({
      client,
      workflows: [Hold, Quick],
      concurrency: 10,
      poolSize: 4,
      ...FAST,
    });
    await w1.start();
    await sleep(500);
    const w2 = new Worker({ client, workflows: [Quick], concurrency: 10, ...FAST });
    await w2.start();
    try {
      for (const id of runIds) {
        expect((await client.waitForRun(id, { timeoutMs: 20_000 })).state).toBe('completed');
      }
      for (const id of runIds) expect(executions.get(id)).toBe(1);
      expect(w1.stats.swept + w2.stats.swept).toBe(0);
    } finally {
      await w1.stop({ graceMs: 6_000 });
      await w2.stop({ graceMs: 2_000 });
    }
  });
});
