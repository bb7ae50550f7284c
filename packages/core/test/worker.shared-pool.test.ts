/**
 * Workers of one `Client` made with a caller-given pool share one completion batcher (the steps
 * both workers finish together are completed in one batch statement for the process, not one per
 * worker, and every step is still completed exactly once), one recovery sweep, which runs
 * until the last of them stops, and one claim: a statement takes steps for every worker that asks
 * meanwhile, each leased to the worker that runs it.
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, newAction, newWorkflow, Worker } from '../src/index.js';
import { createTestDb, type TestDb } from './support/db.js';
import { watchStatements } from './support/pool-spy.js';

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
/** The lease owner each quick step had while its handler ran, by run. */
const owners = new Map<string, string>();
let ownerPool: pg.Pool | undefined;
const noop = newAction('shared_pool_noop', async (ctx) => {
  const { rows } = await (ownerPool as pg.Pool).query<{ owner: string }>(
    `SELECT lease_owner AS owner FROM cyclone.cyclone_steps WHERE run_id = $1 AND node = 'a'`,
    [ctx.runId],
  );
  owners.set(ctx.runId, rows[0]?.owner ?? '');
  return null;
});
const Quick = newWorkflow('shared_pool_quick', { nodes: { a: { action: noop } } });

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
    watchStatements(pool, (name) => {
      if (name.startsWith('cyclone_complete_steps_')) completions.push('batch');
      else if (name.startsWith('cyclone_complete_step_')) completions.push('one');
    });
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
      // The 10 settle in one turn of the event loop and go out together: 1 statement (a batcher
      // per worker sends 2; one not waiting that turn sends the first alone, then the other 9).
      expect(completions).toEqual(['batch']);
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
    watchStatements(pool, (name) => {
      if (name.startsWith('cyclone_sweep_expired_leases_')) sweeps++;
    });
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

  it('claim for all of them in one statement, each step leased to the worker that runs it', async () => {
    const pool = new pg.Pool({ connectionString: db.url, max: 8 });
    // The rows each plain claim statement sent through the pool's connections returned (prepared,
    // so named: cyclone_claim_steps_<digest>, or cyclone_claim_steps_shared_<digest>).
    const claims: number[] = [];
    pool.on('connect', (conn) => {
      const query = conn.query.bind(conn) as (...a: unknown[]) => Promise<unknown>;
      (conn as unknown as { query: unknown }).query = async (...args: unknown[]) => {
        const c = args[0];
        const name =
          typeof c === 'object' && c !== null ? ((c as { name?: string }).name ?? '') : '';
        const res = (await query(...args)) as { rowCount: number | null };
        if (name.startsWith('cyclone_claim_steps_')) claims.push(res.rowCount ?? 0);
        return res;
      };
    });
    const client = new Client({ pool });
    ownerPool = db.pool;
    const workers = [0, 1, 2, 3].map(
      (i) =>
        new Worker({
          client,
          workflows: [Quick],
          concurrency: 5,
          pollIntervalMs: 100,
          workerId: `shared-claim-${i}`,
        }),
    );
    try {
      for (const w of workers) await w.start();
      const runs = 400;
      const { runIds } = await client.submitMany(
        Quick,
        Array.from({ length: runs }, () => ({})),
      );
      for (const id of runIds) {
        const run = await client.waitForRun(id, { timeoutMs: 60_000 });
        expect(run.state).toBe('completed');
      }
      const claimed = claims.reduce((a, b) => a + b, 0);
      expect(claimed).toBe(runs);
      // A worker claims at most its concurrency (5) per statement on its own; shared, the
      // statement fills the free slots of every worker that asked meanwhile, up to 20.
      expect(Math.max(...claims)).toBeGreaterThan(5);
      // Each step ran once, leased to one of the four, and each worker ran as many steps as were
      // leased to it.
      const { rows } = await db.pool.query<{ attempts: number }>(
        `SELECT max(attempt)::int AS attempts FROM cyclone.cyclone_steps s
         JOIN cyclone.cyclone_runs r ON r.id = s.run_id WHERE r.workflow = 'shared_pool_quick'`,
      );
      expect(rows[0]?.attempts).toBe(1);
      const leased = new Map<string, number>();
      for (const o of owners.values()) leased.set(o, (leased.get(o) ?? 0) + 1);
      for (const w of workers) {
        expect(w.stats.completed).toBe(w.stats.claimed);
        expect(leased.get(w.workerId) ?? 0).toBe(w.stats.claimed);
      }
      expect(workers.reduce((a, w) => a + w.stats.completed, 0)).toBe(runs);
    } finally {
      for (const w of workers) await w.stop({ graceMs: 2_000 });
      await client.close();
      await pool.end();
    }
  });
});
