/**
 * The worker registry and throughput counts: a started worker is listed by `client.listWorkers()`
 * with its host, pid, capacity and workflows; its outcomes reach `cyclone_throughput` (completed,
 * failed, discarded per minute and workflow) without a statement per step; its graceful stop
 * removes its row; a dead worker's row and week-old buckets are deleted by another worker's
 * refresh; counts whose refresh failed are kept and added by the next one.
 */
import { hostname } from 'node:os';
import { waitFor } from '@cyclone/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, NonRetryableError, newAction, newWorkflow, Worker } from '../src/index.js';
import { Registry } from '../src/registry.js';
import { createUiReader, type UiReader } from '../src/ui-reader.js';
import { createTestDb, type TestDb } from './support/db.js';
import { captureLogger } from './support/logger.js';

const ok = newAction('reg_ok', async () => ({ ok: true }));
const refuses = newAction(
  'reg_refuses',
  async () => {
    throw new NonRetryableError('refused');
  },
  { maxAttempts: 3 },
);
const Good = newWorkflow('reg_good', {
  nodes: { a: { action: ok }, b: { action: ok, after: ['a'] } },
});
const Bad = newWorkflow('reg_bad', { nodes: { a: { action: refuses } } });

let db: TestDb;
let client: Client;
let reader: UiReader;

beforeAll(async () => {
  db = await createTestDb();
  client = new Client({ connectionString: db.url, poolSize: 3 });
  reader = createUiReader({ client, max: 2 });
});

afterAll(async () => {
  await reader?.close();
  await client?.close();
  await db?.drop();
});

describe('worker registry', () => {
  it('lists a running worker, counts its outcomes and removes it at a graceful stop', async () => {
    const worker = new Worker({
      client,
      workflows: [Good, Bad],
      concurrency: 4,
      pollIntervalMs: 50,
    });
    await worker.start();
    try {
      const [w] = await client.listWorkers();
      expect(w).toMatchObject({
        workerId: worker.workerId,
        host: hostname(),
        pid: process.pid,
        concurrency: 4,
        inFlight: 0,
        workflows: ['reg_good', 'reg_bad'],
        alive: true,
      });
      expect(w?.startedAt).toBeInstanceOf(Date);
      expect(typeof w?.version).toBe('string');
      const ui = await reader.listWorkers();
      expect(ui.map((x) => x.workerId)).toEqual([worker.workerId]);

      const good = await Promise.all([1, 2, 3].map(() => client.submit(Good, {})));
      const bad = await Promise.all([1, 2].map(() => client.submit(Bad, {})));
      for (const r of [...good, ...bad]) await client.waitForRun(r.runId, { timeoutMs: 30_000 });
    } finally {
      await worker.stop();
    }
    // The stop flushed the counts and removed the row.
    expect(await client.listWorkers()).toEqual([]);
    const sum = async (workflow: string) => {
      const t = await reader.throughput({ window: '1h', workflow });
      expect(t.bucketMs).toBe(60_000);
      expect(t.points).toHaveLength(60);
      return t.points.reduce(
        (a, p) => ({
          completed: a.completed + p.completed,
          failed: a.failed + p.failed,
          discarded: a.discarded + p.discarded,
        }),
        { completed: 0, failed: 0, discarded: 0 },
      );
    };
    expect(await sum('reg_good')).toEqual({ completed: 6, failed: 0, discarded: 0 });
    expect(await sum('reg_bad')).toEqual({ completed: 0, failed: 2, discarded: 2 });
    const all = await reader.throughput({ window: '24h' });
    expect(all.points).toHaveLength(288);
    expect(all.points.reduce((a, p) => a + p.completed, 0)).toBe(6);
    expect((await reader.throughput({ window: '7d' })).points).toHaveLength(168);
  });

  it('deletes dead workers and old buckets at a refresh, keeping live rows', async () => {
    await db.pool.query(
      `INSERT INTO cyclone.cyclone_workers (worker_id, host, pid, concurrency, last_seen_at)
       VALUES ('dead', 'h', 1, 1, now() - interval '10 minutes'),
              ('quiet', 'h', 2, 1, now() - interval '20 seconds')`,
    );
    await db.pool.query(
      `INSERT INTO cyclone.cyclone_throughput (minute, workflow, completed)
       VALUES (date_trunc('minute', now() - interval '8 days'), 'old', 1),
              (date_trunc('minute', now() - interval '6 days'), 'kept', 1)`,
    );
    const { logger } = captureLogger();
    const registry = new Registry(
      { pool: db.pool, db: client.db, log: logger, inFlight: () => 0 },
      { workerId: 'live', concurrency: 1, workflows: ['x'] },
    );
    expect(await registry.runOnce()).toEqual({ flushed: 0, pruned: 1 });
    const listed = await client.listWorkers();
    expect(listed.map((w) => [w.workerId, w.alive]).sort()).toEqual([
      ['live', true],
      ['quiet', false],
    ]);
    const { rows } = await db.pool.query(
      'SELECT workflow FROM cyclone.cyclone_throughput ORDER BY workflow',
    );
    expect(rows.map((r) => r.workflow)).not.toContain('old');
    expect(rows.map((r) => r.workflow)).toContain('kept');
    await registry.stop();
    expect((await client.listWorkers()).map((w) => w.workerId)).toEqual(['quiet']);
  });

  it('keeps the counts of a failed refresh for the next one', async () => {
    const { logger } = captureLogger();
    const registry = new Registry(
      { pool: db.pool, db: client.db, log: logger, inFlight: () => 3 },
      { workerId: 'flaky-db', concurrency: 5, workflows: ['kept_counts'] },
    );
    registry.count('kept_counts', { outcome: 'completed' });
    registry.count('kept_counts', { outcome: 'discarded' });
    registry.count('kept_counts', { outcome: 'snoozed' });
    await db.pool.query('ALTER TABLE cyclone.cyclone_throughput RENAME TO throughput_away');
    try {
      await expect(registry.runOnce()).rejects.toThrow(/cyclone_throughput/);
    } finally {
      await db.pool.query('ALTER TABLE cyclone.throughput_away RENAME TO cyclone_throughput');
    }
    registry.count('kept_counts', { outcome: 'skipped' });
    registry.count('kept_counts', { outcome: 'retryable' });
    expect((await registry.runOnce()).flushed).toBeGreaterThanOrEqual(1);
    const { rows } = await db.pool.query(
      `SELECT sum(completed)::int AS c, sum(failed)::int AS f, sum(discarded)::int AS d
       FROM cyclone.cyclone_throughput WHERE workflow = 'kept_counts'`,
    );
    expect(rows[0]).toEqual({ c: 2, f: 2, d: 1 });
    const [w] = (await client.listWorkers()).filter((x) => x.workerId === 'flaky-db');
    expect(w).toMatchObject({ inFlight: 3, concurrency: 5, workflows: ['kept_counts'] });
    await registry.stop();
  });

  it('shows a worker that died without a stop as not alive, then deletes its row', async () => {
    // A worker whose refreshes stopped (SIGKILL) is indistinguishable from a row not refreshed.
    await db.pool.query(
      `INSERT INTO cyclone.cyclone_workers (worker_id, host, pid, concurrency, last_seen_at)
       VALUES ('killed', 'h', 3, 1, now() - interval '16 seconds')`,
    );
    const killed = await waitFor('the killed worker listed', async () =>
      (await client.listWorkers()).find((w) => w.workerId === 'killed'),
    );
    expect(killed.alive).toBe(false);
    const { logger } = captureLogger();
    const registry = new Registry(
      { pool: db.pool, db: client.db, log: logger, inFlight: () => 0 },
      { workerId: 'other', concurrency: 1, workflows: ['x'], staleAfterMs: 15_000 },
    );
    expect((await registry.runOnce()).pruned).toBeGreaterThanOrEqual(1);
    expect((await client.listWorkers()).map((w) => w.workerId)).not.toContain('killed');
    await registry.stop();
  });
});
