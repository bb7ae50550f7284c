/**
 * Transactional enqueue: `client.submit(wf, input, { tx })` inside the caller's transaction. The
 * run exists only if that transaction commits, together with the caller's own writes.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, newAction, newWorkflow, Worker } from '../src/index.js';
import { createTestDb, type TestDb } from './support/db.js';

const handled: { runId: string; orderId: string; orderVisible: boolean }[] = [];
const fulfil = newAction('fulfil', async (ctx, input: { orderId: string }) => {
  // The caller's row committed with the run, so the handler sees it.
  const tx = await ctx.completionTx();
  const { rows } = await tx.query('SELECT 1 FROM orders WHERE id = $1', [input.orderId]);
  handled.push({ runId: ctx.runId, orderId: input.orderId, orderVisible: rows.length === 1 });
  await tx.query('UPDATE orders SET fulfilled = true WHERE id = $1', [input.orderId]);
  return { orderId: input.orderId };
});
const Fulfil = newWorkflow('fulfil', { nodes: { fulfil: { action: fulfil } } });

describe('transactional enqueue', () => {
  let db: TestDb;
  let client: Client;
  let worker: Worker;

  beforeAll(async () => {
    db = await createTestDb();
    await db.pool.query(
      'CREATE TABLE orders (id text PRIMARY KEY, fulfilled boolean NOT NULL DEFAULT false)',
    );
    client = new Client({ connectionString: db.url, poolSize: 4 });
    worker = new Worker({ client, workflows: [Fulfil], concurrency: 2, pollIntervalMs: 50 });
    await worker.start();
  });

  afterAll(async () => {
    await worker?.stop({ graceMs: 1_000 });
    await client?.close();
    await db?.drop();
  });

  async function runsFor(orderId: string): Promise<string[]> {
    const { rows } = await db.pool.query<{ id: string }>(
      `SELECT id FROM cyclone.cyclone_runs WHERE input->>'orderId' = $1`,
      [orderId],
    );
    return rows.map((r) => r.id);
  }

  it('a submit inside a transaction that rolls back leaves no run and no steps', async () => {
    const c = await db.pool.connect();
    let runId: string;
    try {
      await c.query('BEGIN');
      await c.query('INSERT INTO orders (id) VALUES ($1)', ['o-rollback']);
      ({ runId } = await client.submit(Fulfil, { orderId: 'o-rollback' }, { tx: c }));
      // Visible inside the transaction only.
      const inside = await c.query('SELECT 1 FROM cyclone.cyclone_runs WHERE id = $1', [runId]);
      expect(inside.rows).toHaveLength(1);
      expect(await runsFor('o-rollback')).toEqual([]);
      await c.query('ROLLBACK');
    } finally {
      c.release();
    }
    expect(await runsFor('o-rollback')).toEqual([]);
    const steps = await db.pool.query('SELECT 1 FROM cyclone.cyclone_steps WHERE run_id = $1', [
      runId,
    ]);
    expect(steps.rows).toHaveLength(0);
    const orders = await db.pool.query(`SELECT 1 FROM orders WHERE id = 'o-rollback'`);
    expect(orders.rows).toHaveLength(0);
  });

  it('a submit inside a transaction that commits is picked up and completes', async () => {
    const c = await db.pool.connect();
    let runId: string;
    try {
      await c.query('BEGIN');
      await c.query('INSERT INTO orders (id) VALUES ($1)', ['o-commit']);
      ({ runId } = await Fulfil.submit(client, { orderId: 'o-commit' }, { tx: c }));
      expect(await runsFor('o-commit')).toEqual([]);
      await c.query('COMMIT');
    } finally {
      c.release();
    }
    const run = await client.waitForRun(runId, { timeoutMs: 20_000 });
    expect(run.state).toBe('completed');
    expect(run.steps[0]?.output).toEqual({ orderId: 'o-commit' });
    expect(handled.filter((h) => h.runId === runId)).toEqual([
      { runId, orderId: 'o-commit', orderVisible: true },
    ]);
    const orders = await db.pool.query(`SELECT fulfilled FROM orders WHERE id = 'o-commit'`);
    expect(orders.rows).toEqual([{ fulfilled: true }]);
  });

  it('a transaction that fails after the submit rolls the run back with it', async () => {
    await db.pool.query(`INSERT INTO orders (id) VALUES ('o-dup')`);
    const c = await db.pool.connect();
    try {
      await c.query('BEGIN');
      await client.submit(Fulfil, { orderId: 'o-dup-2' }, { tx: c });
      // The caller's own write fails (duplicate key): the transaction is aborted.
      await expect(c.query(`INSERT INTO orders (id) VALUES ('o-dup')`)).rejects.toThrow();
      await c.query('ROLLBACK');
    } finally {
      c.release();
    }
    expect(await runsFor('o-dup-2')).toEqual([]);
  });

  it('submitOnce inside a rolled back transaction leaves the key free', async () => {
    const c = await db.pool.connect();
    try {
      await c.query('BEGIN');
      const r = await client.submitOnce(Fulfil, 'key-rolled-back', { orderId: 'o-key' }, { tx: c });
      expect(r.created).toBe(true);
      await c.query('ROLLBACK');
    } finally {
      c.release();
    }
    await db.pool.query(`INSERT INTO orders (id) VALUES ('o-key')`);
    const again = await client.submitOnce(Fulfil, 'key-rolled-back', { orderId: 'o-key' });
    expect(again.created).toBe(true);
    const run = await client.waitForRun(again.runId, { timeoutMs: 20_000 });
    expect(run.state).toBe('completed');
  });

  it('no handler ever ran for a rolled back run', () => {
    expect(handled.map((h) => h.orderId).sort()).toEqual(['o-commit', 'o-key']);
  });
});
