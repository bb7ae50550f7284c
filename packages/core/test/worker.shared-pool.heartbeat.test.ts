/**
 * Workers of one `Client` made with a caller-given pool beat together: one heartbeat statement
 * per interval extends every worker's steps, each under its own worker's ownership, instead of
 * one statement per worker; it beats until the last of them stops.
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, newAction, newWorkflow, Worker } from '../src/index.js';
import { createTestDb, type TestDb } from './support/db.js';
import { watchStatements } from './support/pool-spy.js';

let started = 0;
let release: () => void = () => {};
const released = new Promise<void>((r) => {
  release = r;
});
const gated = newAction('shared_beat_gated', async () => {
  started++;
  await released;
  return null;
});
const Flow = newWorkflow('shared_beat_flow', { nodes: { a: { action: gated } } });

describe('workers on one caller-given pool', () => {
  let db: TestDb;

  beforeAll(async () => {
    db = await createTestDb();
  });
  afterAll(async () => {
    await db.drop();
  });

  it('extend all their leases in one heartbeat statement per interval, not one each', async () => {
    const pool = new pg.Pool({ connectionString: db.url, max: 8 });
    /** Steps per heartbeat statement sent through the pool. */
    const beats: number[] = [];
    watchStatements(pool, (name, values) => {
      // The first value is the steps' run ids.
      if (name.startsWith('cyclone_extend_leases_')) beats.push((values[0] as unknown[]).length);
    });
    const client = new Client({ pool });
    const leaseMs = 1_500;
    const workers = [0, 1, 2].map(
      () =>
        new Worker({
          client,
          workflows: [Flow],
          concurrency: 2,
          leaseMs,
          heartbeatIntervalMs: 100,
          sweepIntervalMs: 200,
          listen: false,
          pollIntervalMs: 50,
        }),
    );
    try {
      for (let i = 0; i < 6; i++) await client.submit(Flow, {});
      for (const w of workers) await w.start();
      const t0 = Date.now();
      while (started < 6 && Date.now() - t0 < 10_000) await new Promise((r) => setTimeout(r, 20));
      expect(started).toBe(6);
      expect(workers.map((w) => w.running)).toEqual([2, 2, 2]);
      const from = beats.length;
      const t1 = Date.now();
      // Twice the lease: every step would have been swept and lost had a worker's beats stopped.
      await new Promise((r) => setTimeout(r, 2 * leaseMs));
      const ms = Date.now() - t1;
      const sent = beats.slice(from);
      // One statement per 100 ms for all three workers; one each would be three times as many.
      expect(sent.length).toBeGreaterThan(0);
      expect(sent.length).toBeLessThanOrEqual(Math.ceil(ms / 100) + 2);
      // Each statement carried every worker's steps.
      expect(Math.max(...sent)).toBe(6);
      const { rows } = await db.pool.query<{ owner: string; n: number; ok: boolean }>(
        `SELECT lease_owner AS owner, count(*)::int AS n,
                bool_and(lease_expires_at > now()) AS ok
         FROM cyclone.cyclone_steps WHERE workflow = 'shared_beat_flow' AND state = 'running'
         GROUP BY 1 ORDER BY 1`,
      );
      expect(rows.map((r) => r.owner)).toEqual(workers.map((w) => w.workerId).sort());
      expect(rows.every((r) => r.n === 2 && r.ok)).toBe(true);
      expect(workers.reduce((a, w) => a + w.stats.swept, 0)).toBe(0);
      release();
      const t2 = Date.now();
      while (workers.reduce((a, w) => a + w.stats.completed, 0) < 6 && Date.now() - t2 < 10_000) {
        await new Promise((r) => setTimeout(r, 20));
      }
      expect(workers.map((w) => w.stats.completed)).toEqual([2, 2, 2]);
    } finally {
      release();
      for (const w of workers) await w.stop({ graceMs: 1_000 });
      const after = beats.length;
      await new Promise((r) => setTimeout(r, 300));
      expect(beats.length).toBe(after);
      await client.close();
      await pool.end();
    }
  });
});
