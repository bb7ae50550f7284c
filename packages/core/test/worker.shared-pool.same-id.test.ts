/**
 * Workers on one caller-given pool share one claim statement, whose rows are handed out by lease
 * owner. Two workers given the same `workerId` (documented as unique, but nothing stops it) must
 * still never both run a step: each step's handler runs once.
 */
import pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { Client, newAction, newWorkflow, Worker } from '../src/index.js';
import { createTestDb, type TestDb } from './support/db.js';

/** Handler runs by run id. */
const runs = new Map<string, number>();
const slow = newAction('same_id_slow', async (ctx) => {
  runs.set(ctx.runId, (runs.get(ctx.runId) ?? 0) + 1);
  await new Promise((r) => setTimeout(r, 20 + Math.random() * 40));
  return null;
});
const Slow = newWorkflow('same_id_slow', { nodes: { a: { action: slow } } });

let db: TestDb;
beforeAll(async () => {
  db = await createTestDb();
});
afterAll(async () => {
  await db?.drop();
});

it('two workers with the same workerId on one caller-given pool run each step once', async () => {
  const pool = new pg.Pool({ connectionString: db.url, max: 8 });
  const client = new Client({ pool });
  const workers = [0, 1, 2].map(
    () =>
      new Worker({
        client,
        workflows: [Slow],
        concurrency: 5,
        pollIntervalMs: 50,
        workerId: 'same-id',
      }),
  );
  try {
    const ids: string[] = [];
    for (let n = 0; n < 60; n++) ids.push((await client.submit(Slow, {})).runId);
    for (const w of workers) await w.start();
    for (const id of ids) {
      const run = await client.waitForRun(id, { timeoutMs: 30_000, pollMs: 50 });
      expect(run.state).toBe('completed');
    }
    const twice = [...runs.entries()].filter(([, n]) => n > 1);
    expect(twice).toEqual([]);
    expect(runs.size).toBe(60);
  } finally {
    for (const w of workers) await w.stop({ graceMs: 2_000 });
    await client.close();
    await pool.end();
  }
}, 60_000);
