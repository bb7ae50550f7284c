/**
 * A limited step held for a later time (a delayed run, a snooze, a retry's backoff) starts when
 * it comes due, not at the worker's next poll: the idle wait reads limited steps' due times too.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import { Client, newAction, newWorkflow, Worker } from '../src/index.js';
import { createTestDb, type TestDb } from './support/db.js';

let db: TestDb;
let client: Client;

beforeAll(async () => {
  db = await createTestDb();
  client = new Client({ connectionString: db.url, poolSize: 4 });
}, 60_000);

afterAll(async () => {
  await client?.close();
  await db?.drop();
});

const Limited = newWorkflow('fcd_limited', {
  nodes: {
    only: { action: newAction('fcd_limited', async () => ({}), { concurrency: { limit: 5 } }) },
  },
});

it('a delayed run of a limited action starts at its time, well before a long poll interval', async () => {
  const worker = new Worker({
    client,
    workflows: [Limited],
    concurrency: 4,
    pollIntervalMs: 10_000,
  });
  try {
    await worker.start();
    // Let the worker settle into its idle wait (nothing due: the poll interval).
    await new Promise((r) => setTimeout(r, 1_000));
    const { runId } = await client.submit(Limited, {}, { delayMs: 1_500 });
    const run = await client.waitForRun(runId, { timeoutMs: 30_000, pollMs: 50 });
    expect(run.state).toBe('completed');
    const step = run.steps[0];
    if (!step?.startedAt) throw new Error('the step never started');
    // Late by the idle wait's margins at most, never by the 10 s poll interval.
    expect(step.startedAt.getTime() - step.scheduledAt.getTime()).toBeLessThan(5_000);
  } finally {
    await worker.stop({ graceMs: 2_000 });
  }
}, 60_000);
