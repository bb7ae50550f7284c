/**
 * A wake during the next-due read ends the wait at once and the loop claims again; when that
 * claim finds nothing (the step that woke it is due soon, not yet), the loop must not take the
 * due time from the read still in flight, whose snapshot predates that step: it would sleep the
 * whole poll interval instead of until the step is due.
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, newAction, newWorkflow, Worker } from '../src/index.js';
import { createTestDb, type TestDb } from './support/db.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const noop = newAction('due_wake_noop', async () => ({}));
const W = newWorkflow('due_wake', { nodes: { only: { action: noop } } });

describe('a next-due read begun before a wake', () => {
  let db: TestDb;
  let pool: pg.Pool;
  let client: Client;
  let worker: Worker;

  beforeAll(async () => {
    db = await createTestDb();
    pool = new pg.Pool({ connectionString: db.url, max: 8 });
    // The next-due read's answer arrives 100 ms after its statement ran (a slow network), so a
    // NOTIFY reliably comes while it is in flight.
    pool.on('connect', (c) => {
      const query = c.query.bind(c) as (...a: unknown[]) => unknown;
      (c as unknown as { query: unknown }).query = (...args: unknown[]) => {
        const q = args[0];
        const name =
          typeof q === 'object' && q !== null ? (q as { name?: string }).name : undefined;
        const r = query(...args);
        if (!name?.includes('next_due') || !(r instanceof Promise)) return r;
        return r.then((v) => sleep(100).then(() => v));
      };
    });
    client = new Client({ pool });
    // No poll within the test: only wakes and next-due reads make the loop claim.
    worker = new Worker({ client, workflows: [W], pollIntervalMs: 60_000, concurrency: 4 });
    await worker.start();
    await sleep(300);
  });
  afterAll(async () => {
    await worker?.stop();
    await client?.close();
    await pool?.end();
    await db?.drop();
  });

  it('does not decide the wait for a step submitted while it ran', async () => {
    for (let i = 0; i < 3; i++) {
      // Wakes the idle worker: an empty claim, then a next-due read (an hour away).
      await client.submit(W, {}, { delayMs: 3_600_000 });
      await sleep(10);
      // Its NOTIFY comes during that read; the claim it causes finds nothing yet.
      const { runId } = await client.submit(W, {}, { delayMs: 50 });
      const run = await client.waitForRun(runId, { timeoutMs: 5_000 });
      expect(run.state).toBe('completed');
      const step = run.steps[0];
      expect(step?.startedAt).toBeInstanceOf(Date);
      const late = (step?.startedAt?.getTime() ?? 0) - (step?.scheduledAt.getTime() ?? 0);
      expect(late).toBeLessThan(1_000);
    }
  }, 30_000);
});
