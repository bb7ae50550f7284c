/**
 * An idle worker whose step was a leaf that completed sends nothing more: no empty claim and no
 * next-due read after each step (its completion released nothing, and new work NOTIFYs). A step
 * that fails with a backoff still makes the loop read when its next attempt is due.
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, newAction, newWorkflow, Worker } from '../src/index.js';
import { createTestDb, type TestDb } from './support/db.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const ok = newAction('quiet_ok', async () => ({ ok: true }));
let fails = 0;
const flaky = newAction(
  'quiet_flaky',
  async () => {
    if (fails++ === 0) throw new Error('first attempt fails');
    return {};
  },
  { maxAttempts: 3, backoff: () => 300 },
);
const Leaf = newWorkflow('quiet_leaf', { nodes: { only: { action: ok } } });
const Flaky = newWorkflow('quiet_flaky', { nodes: { only: { action: flaky } } });

describe('the claim loop after a step ends', () => {
  let db: TestDb;
  let pool: pg.Pool;
  let client: Client;
  let worker: Worker;
  // Every prepared statement any connection of the pool sends, in order, with its time.
  const sent: { name: string; at: number }[] = [];

  beforeAll(async () => {
    db = await createTestDb();
    pool = new pg.Pool({ connectionString: db.url, max: 8 });
    pool.on('connect', (c) => {
      const query = c.query.bind(c) as (...a: unknown[]) => unknown;
      (c as unknown as { query: unknown }).query = (...args: unknown[]) => {
        const q = args[0];
        const name =
          typeof q === 'object' && q !== null ? (q as { name?: string }).name : undefined;
        if (name) sent.push({ name, at: Date.now() });
        return query(...args);
      };
    });
    client = new Client({ pool });
    // No poll within the test: only wakes make the loop claim.
    worker = new Worker({ client, workflows: [Leaf, Flaky], pollIntervalMs: 60_000 });
    await worker.start();
    await sleep(300);
  });
  afterAll(async () => {
    await worker?.stop();
    await client?.close();
    await pool?.end();
    await db?.drop();
  });

  const after = (name: string) => {
    const i = sent.findIndex((s) => s.name.includes(name));
    return i < 0 ? [] : sent.slice(i + 1).map((s) => s.name);
  };

  it('a completed leaf: no claim and no next-due read after its completion', async () => {
    sent.length = 0;
    const { runId } = await client.submit(Leaf, {});
    const run = await client.waitForRun(runId, { timeoutMs: 10_000 });
    expect(run.state).toBe('completed');
    await sleep(400);
    const names = sent.map((s) => s.name);
    expect(names.filter((n) => n.includes('claim_steps'))).toHaveLength(1);
    // The claim that took the step found fewer than its free slots, so the loop read when the
    // next step is due (once); nothing after the completion asks again.
    expect(after('complete_step').filter((n) => n.includes('claim'))).toEqual([]);
    expect(names.filter((n) => n.includes('next_due'))).toHaveLength(1);
  });

  it('a failed attempt with a backoff: the loop reads the next due time and runs it again', async () => {
    sent.length = 0;
    const t0 = Date.now();
    const { runId } = await client.submit(Flaky, {});
    // Without the wake after the failure, the retry would wait for the 60 s poll.
    const run = await client.waitForRun(runId, { timeoutMs: 10_000 });
    expect(run.state).toBe('completed');
    expect(run.steps[0]?.attempt).toBe(2);
    expect(Date.now() - t0).toBeLessThan(5_000);
    expect(after('fail_step').some((n) => n.includes('next_due'))).toBe(true);
  });
});
