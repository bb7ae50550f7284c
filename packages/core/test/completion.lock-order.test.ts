/**
 * Completions of one join never deadlock each other (break test of issue 8's changes): every
 * completion statement locks the downstream rows it changes in (run_id, node) order and the run
 * rows after them, in id order. Before, two completion batches of different workers sharing two
 * runs could lock those rows in opposite orders; PostgreSQL then aborted one of the statements,
 * and when the victim was a handler's completionTx its attempt was recorded as failed ("deadlock
 * detected"): with maxAttempts 1 the run failed although its handler had done nothing wrong.
 * Measured with the server's own deadlock counter for the test database.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, type NodeSpec, newAction, newWorkflow, Worker } from '../src/index.js';
import { createTestDb, deadlockCount, type TestDb } from './support/db.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const P = Array.from({ length: 8 }, (_, i) => `p${i}`);

const root = newAction('lock_root', async () => ({}));
const parallel = newAction(
  'lock_parallel',
  async (ctx) => {
    await sleep(Math.random() * 5);
    // Half complete on their own transaction, half through the worker's batches.
    if (Number(ctx.node.slice(1)) % 2 === 0) {
      const tx = await ctx.completionTx();
      await tx.query('INSERT INTO public.lock_writes VALUES ($1, $2)', [ctx.runId, ctx.node]);
    }
    return {};
  },
  { maxAttempts: 1 },
);
const join = newAction('lock_join', async () => ({}));
const nodes: Record<string, NodeSpec<unknown>> = { root: { action: root } };
for (const p of P) nodes[p] = { action: parallel, after: ['root'] };
nodes.join = { action: join, after: P };
const Flow = newWorkflow('lock_flow', { nodes });

describe('completion lock order', () => {
  let db: TestDb;
  let client: Client;

  beforeAll(async () => {
    db = await createTestDb();
    await db.pool.query(
      'CREATE TABLE public.lock_writes (run_id uuid, node text, PRIMARY KEY (run_id, node))',
    );
    client = new Client({ connectionString: db.url, poolSize: 4 });
  });
  afterAll(async () => {
    await client?.close();
    await db?.drop();
  });

  it('three workers completing the fan-in of 300 runs at once: no deadlock, no failed run', async () => {
    const deadlocks = () => deadlockCount(db.pool);
    const before = await deadlocks();
    const { runIds } = await client.submitMany(
      Flow,
      Array.from({ length: 300 }, () => ({})),
    );
    const workers = [1, 2, 3].map(() => new Worker({ client, workflows: [Flow], concurrency: 16 }));
    for (const w of workers) await w.start();
    try {
      for (const id of runIds) {
        expect((await client.waitForRun(id, { timeoutMs: 60_000 })).state).toBe('completed');
      }
    } finally {
      for (const w of workers) await w.stop({ graceMs: 5_000 });
    }
    const { rows } = await db.pool.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM cyclone.cyclone_steps WHERE errors <> '[]'",
    );
    expect(rows[0]?.n).toBe(0);
    expect((await db.pool.query('SELECT 1 FROM public.lock_writes')).rowCount).toBe(300 * 4);
    // The server counts a deadlock when it detects it; its statistics reach pg_stat_database
    // when the backend reports them (at the latest when it exits: the workers' pools are closed).
    await sleep(1_500);
    expect((await deadlocks()) - before).toBe(0);
  });
});
