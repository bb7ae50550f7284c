/**
 * Workers of one `Client` made with a caller-given pool report to the registry together: one
 * statement per interval upserts every worker's own row (its id, concurrency, steps in flight,
 * workflows) and adds their throughput counts summed, instead of one statement per worker; a
 * stopped worker's row is deleted and its last counts flushed, and the reports end with the last.
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, newAction, newWorkflow, Worker } from '../src/index.js';
import { Registry, registryGroup } from '../src/registry.js';
import { createUiReader } from '../src/ui-reader.js';
import { createTestDb, type TestDb } from './support/db.js';
import { captureLogger } from './support/logger.js';
import { watchStatements } from './support/pool-spy.js';

let started = 0;
let release: () => void = () => {};
const released = new Promise<void>((r) => {
  release = r;
});
const gated = newAction('shared_reg_gated', async () => {
  started++;
  await released;
  return null;
});
const quick = newAction('shared_reg_quick', async () => null);
const Gated = newWorkflow('shared_reg_flow', { nodes: { a: { action: gated } } });
const Quick = newWorkflow('shared_reg_quick_flow', { nodes: { a: { action: quick } } });

describe('workers on one caller-given pool', () => {
  let db: TestDb;

  beforeAll(async () => {
    db = await createTestDb();
  });
  afterAll(async () => {
    await db.drop();
  });

  it('send one registry report per interval between them, each row still its own', async () => {
    const pool = new pg.Pool({ connectionString: db.url, max: 8 });
    /** Worker rows carried by each registry statement sent through the pool. */
    const reports: number[] = [];
    watchStatements(pool, (name, values) => {
      if (!name.startsWith('cyclone_report_worker')) return;
      // One worker's report has its id first; the shared one a JSON array of the workers.
      reports.push(
        name.startsWith('cyclone_report_workers_') ? JSON.parse(values[0] as string).length : 1,
      );
    });
    const client = new Client({ pool });
    const workers = [1, 2, 3, 4, 5].map(
      (concurrency) =>
        new Worker({
          client,
          workflows: [Gated, Quick],
          concurrency,
          sweepIntervalMs: 200,
          listen: false,
          pollIntervalMs: 50,
        }),
    );
    try {
      for (let i = 0; i < 6; i++) await client.submit(Gated, {});
      for (let i = 0; i < 20; i++) await client.submit(Quick, {});
      for (const w of workers) await w.start();
      const t0 = Date.now();
      while (
        (started < 6 || workers.reduce((a, w) => a + w.stats.completed, 0) < 20) &&
        Date.now() - t0 < 10_000
      ) {
        await new Promise((r) => setTimeout(r, 20));
      }
      expect(started).toBe(6);
      const from = reports.length;
      const t1 = Date.now();
      // Past one 5 s interval (± 10 %): five workers reporting each would send about five.
      await new Promise((r) => setTimeout(r, 6_000));
      const ms = Date.now() - t1;
      const sent = reports.slice(from);
      expect(sent.length).toBeGreaterThan(0);
      expect(sent.length).toBeLessThanOrEqual(Math.ceil(ms / 4_500));
      // Each statement carried every worker's row.
      expect(sent.every((n) => n === 5)).toBe(true);
      const listed = await client.listWorkers();
      const byId = new Map(listed.map((w) => [w.workerId, w]));
      expect([...byId.keys()].sort()).toEqual(workers.map((w) => w.workerId).sort());
      for (const w of workers) {
        expect(byId.get(w.workerId)).toMatchObject({
          pid: process.pid,
          concurrency: (w as unknown as { concurrency: number }).concurrency,
          inFlight: w.running,
          workflows: ['shared_reg_flow', 'shared_reg_quick_flow'],
          alive: true,
        });
      }
      expect(listed.reduce((a, w) => a + w.inFlight, 0)).toBe(6);
      // The counts so far reached the throughput table once, summed over the workers.
      const reader = createUiReader({ client, max: 1 });
      try {
        const t = await reader.throughput({ window: '1h', workflow: 'shared_reg_quick_flow' });
        expect(t.points.reduce((a, p) => a + p.completed, 0)).toBe(20);
        const ui = await reader.listWorkers();
        expect(ui.map((x) => x.workerId).sort()).toEqual(workers.map((w) => w.workerId).sort());
      } finally {
        await reader.close();
      }
      release();
      // One worker stops: its row goes, the others stay.
      await workers[0]?.stop({ graceMs: 1_000 });
      const left = (await client.listWorkers()).map((w) => w.workerId).sort();
      expect(left).toEqual(
        workers
          .slice(1)
          .map((w) => w.workerId)
          .sort(),
      );
    } finally {
      release();
      for (const w of workers) await w.stop({ graceMs: 1_000 });
      expect(await client.listWorkers()).toEqual([]);
      const { rows } = await db.pool.query<{ n: string }>(
        `SELECT coalesce(sum(completed), 0) AS n FROM cyclone.cyclone_throughput`,
      );
      expect(Number(rows[0]?.n)).toBe(26);
      const after = reports.length;
      await new Promise((r) => setTimeout(r, 300));
      expect(reports.length).toBe(after);
      await client.close();
      await pool.end();
    }
  });
  it('report two workers given one id as one row, their counts summed', async () => {
    const pool = new pg.Pool({ connectionString: db.url, max: 2 });
    const client = new Client({ pool });
    const { logger, entries } = captureLogger();
    const group = registryGroup(pool, client.db, logger, { intervalMs: 60_000 });
    const make = (inFlight: number) =>
      new Registry(
        { pool, db: client.db, log: logger, inFlight: () => inFlight, group },
        { workerId: 'twin', concurrency: 3, workflows: ['twin_flow'], intervalMs: 60_000 },
      );
    const a = make(1);
    const b = make(2);
    const done = { outcome: 'completed' } as Parameters<Registry['count']>[1];
    try {
      a.count('twin_flow', done);
      b.count('twin_flow', done);
      b.count('twin_flow', done);
      await Promise.all([a.start(), b.start()]);
      expect(entries.filter((e) => e.level === 'warn')).toEqual([]);
      const listed = await client.listWorkers();
      expect(listed.map((w) => [w.workerId, w.concurrency])).toEqual([['twin', 3]]);
      const { rows } = await db.pool.query<{ n: string }>(
        `SELECT sum(completed) AS n FROM cyclone.cyclone_throughput WHERE workflow = 'twin_flow'`,
      );
      expect(Number(rows[0]?.n)).toBe(3);
    } finally {
      await a.stop();
      await b.stop();
      await client.close();
      await pool.end();
    }
    expect(entries.filter((e) => e.level === 'warn')).toEqual([]);
  });
});
