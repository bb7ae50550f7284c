/**
 * Workers of one `Client` made with a caller-given pool share one completion batcher (the steps
 * both workers finish together are completed in one batch statement for the process, not one per
 * worker, and every step is still completed exactly once) and one recovery sweep, which runs
 * until the last of them stops.
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, newAction, newWorkflow, Worker } from '../src/index.js';
import { createTestDb, type TestDb } from './support/db.js';

/** Handlers started so far, and the release they all wait for. */
let started = 0;
let release: () => void = () => {};
let released = new Promise<void>((r) => {
  release = r;
});

const gated = newAction('shared_pool_gated', async () => {
  started++;
  await released;
  return null;
});
const Flow = newWorkflow('shared_pool_flow', { nodes: { a: { action: gated } } });

describe('workers on one caller-given pool', () => {
  let db: TestDb;

  beforeAll(async () => {
    db = await createTestDb();
  });
  afterAll(async () => {
    await db.drop();
  });

  it('complete the steps both finish together in one batch statement, each step once', async () => {
    const pool = new pg.Pool({ connectionString: db.url, max: 8 });
    // The completion statements sent through the pool: 'one' (a single step) or 'batch'.
    const completions: string[] = [];
    const query = pool.query.bind(pool) as (...a: unknown[]) => Promise<unknown>;
    (pool as unknown as { query: unknown }).query = (...args: unknown[]) => {
      const c = args[0];
      const name = typeof c === 'object' && c !== null ? ((c as { name?: string }).name ?? '') : '';
      if (name.startsWith('cyclone_complete_steps_')) completions.push('batch');
      else if (name.startsWith('cyclone_complete_step_')) completions.push('one');
      return query(...args);
    };
    const client = new Client({ pool });
    started = 0;
    released = new Promise<void>((r) => {
      release = r;
    });
    const workers = [0, 1].map(
      () => new Worker({ client, workflows: [Flow], concurrency: 5, pollIntervalMs: 50 }),
    );
    try {
      const ids: string[] = [];
      for (let n = 0; n < 10; n++) ids.push((await client.submit(Flow, {})).runId);
      for (const w of workers) await w.start();
      const deadline = Date.now() + 20_000;
      while (started < 10) {
        if (Date.now() > deadline) throw new Error(`${started} of 10 handlers started`);
        await new Promise((r) => setTimeout(r, 20));
      }
      // Both workers hold 5 steps each; all finish in the same turn of the event loop.
      expect(workers.map((w) => w.running)).toEqual([5, 5]);
      release();
      for (const id of ids) {
        const run = await client.waitForRun(id, { timeoutMs: 20_000 });
        expect(run.state).toBe('completed');
      }
      // The first completion goes out at once, the other 9 together: 2 statements (a batcher per
      // worker sends 4: one and four, twice).
      expect(completions).toEqual(['one', 'batch']);
      const { rows } = await db.pool.query<{ attempts: number }>(
        'SELECT max(attempt)::int AS attempts FROM cyclone.cyclone_steps',
      );
      expect(rows[0]?.attempts).toBe(1);
    } finally {
      release();
      for (const w of workers) await w.stop({ graceMs: 2_000 });
      await client.close();
      await pool.end();
    }
  });

  it('run one recovery sweep between them, not one each', async () => {
    const pool = new pg.Pool({ connectionString: db.url, max: 8 });
    let sweeps = 0;
    const query = pool.query.bind(pool) as (...a: unknown[]) => Promise<unknown>;
    (pool as unknown as { query: unknown }).query = (...args: unknown[]) => {
      const c = args[0];
      const name = typeof c === 'object' && c !== null ? ((c as { name?: string }).name ?? '') : '';
      if (name.startsWith('cyclone_sweep_expired_leases_')) sweeps++;
      return query(...args);
    };
    const client = new Client({ pool });
    const workers = [0, 1, 2, 3].map(
      () => new Worker({ client, workflows: [Flow], sweepIntervalMs: 100, listen: false }),
    );
    try {
      for (const w of workers) await w.start();
      const from = sweeps;
      const t0 = Date.now();
      await new Promise((r) => setTimeout(r, 2_000));
      const ms = Date.now() - t0;
      // One sweep every 100 ms ± 20 %: at most ms / 80 + 1 statements; four would send about
      // four times as many.
      expect(sweeps - from).toBeLessThanOrEqual(Math.ceil(ms / 80) + 1);
      // The last worker to stop ends it; the others leave it running until then.
      await workers[0]?.stop({ graceMs: 1_000 });
      const before = sweeps;
      await new Promise((r) => setTimeout(r, 500));
      expect(sweeps).toBeGreaterThan(before);
    } finally {
      for (const w of workers) await w.stop({ graceMs: 1_000 });
      const after = sweeps;
      await new Promise((r) => setTimeout(r, 300));
      expect(sweeps).toBe(after);
      await client.close();
      await pool.end();
    }
  });
});
