/**
 * One step whose upstream outputs add up to more than PostgreSQL allows in one JSON value
 * (256 MiB) makes the claim statement, which gathers them, fail whole; that step is the oldest
 * claimable, so it is in every claim. It must fail alone, with a clear error on that step, and
 * never hold up the steps of other runs.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import { Client, newAction, newWorkflow, Worker } from '../src/index.js';
import { createTestDb, type TestDb } from './support/db.js';

let db: TestDb;
let client: Client;
let worker: Worker | undefined;

beforeAll(async () => {
  db = await createTestDb();
  client = new Client({ connectionString: db.url, poolSize: 4 });
});
afterAll(async () => {
  await worker?.stop({ graceMs: 1_000 });
  await client?.close();
  await db?.drop();
});

const Echo = newAction('big_echo', async (ctx) => ({ node: ctx.node }));
const FanIn = newWorkflow('big_fan_in', {
  nodes: {
    a: { action: Echo },
    b: { action: Echo },
    c: { action: Echo },
    z: { action: Echo, after: ['a', 'b', 'c'] },
  },
});
const Small = newWorkflow('big_small', { nodes: { only: { action: Echo } } });

it('a step whose upstream outputs exceed one JSON value fails alone; other runs go on', async () => {
  const { runId } = await client.submit(FanIn, {});
  // The fan-in's upstream nodes completed with ~95 MiB outputs each (made on the server), and
  // the join released and older than anything else claimable: as if they had run.
  await client.pool.query(
    `UPDATE cyclone.cyclone_steps
     SET state = 'completed', completed_at = now(), attempt = 1,
         output = to_jsonb(repeat('x', 95 * 1024 * 1024))
     WHERE run_id = $1 AND node IN ('a', 'b', 'c')`,
    [runId],
  );
  await client.pool.query(
    `UPDATE cyclone.cyclone_steps SET state = 'available', deps_remaining = 0,
       scheduled_at = now() - interval '1 hour'
     WHERE run_id = $1 AND node = 'z'`,
    [runId],
  );
  await client.pool.query(
    'UPDATE cyclone.cyclone_runs SET steps_remaining = 1, steps_active = 1 WHERE id = $1',
    [runId],
  );
  const others = (
    await client.submitMany(
      Small,
      Array.from({ length: 30 }, () => ({})),
    )
  ).runIds;

  worker = new Worker({ client, workflows: [FanIn, Small], concurrency: 5, pollIntervalMs: 100 });
  await worker.start();
  for (const id of others) {
    expect((await client.waitForRun(id, { timeoutMs: 30_000, pollMs: 50 })).state).toBe(
      'completed',
    );
  }
  const run = await client.waitForRun(runId, { timeoutMs: 30_000, pollMs: 50 });
  expect(run.state).toBe('failed');
  const z = run.steps.find((s) => s.node === 'z');
  expect(z?.state).toBe('discarded');
  expect(z?.errors).toHaveLength(1);
  expect(z?.errors[0]?.kind).toBe('input_invalid');
  expect(z?.errors[0]?.message).toMatch(/upstream nodes of 'z' cannot be loaded as one JSON value/);
});
