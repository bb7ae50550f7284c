/**
 * A completionTx whose step is fenced out while the handler runs (its attempt moved on, as when
 * another worker took the step over): its writes must not commit. On the worker's own
 * (pipelined) step pool the COMMIT goes out with the completion, not waiting for its answer, so
 * only a completion that fails when fenced out keeps it from committing them; on a caller-given
 * pool the COMMIT waits for the completion's answer. Both are checked.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import { Client, newAction, newWorkflow, Worker } from '../src/index.js';
import { createTestDb, type TestDb } from './support/db.js';

let db: TestDb;
const cleanup: (() => Promise<unknown>)[] = [];

const Fenced = newWorkflow('fenced_out_tx', {
  nodes: {
    only: {
      action: newAction('fenced_out_tx', async (ctx) => {
        const tx = await ctx.completionTx();
        await tx.query('INSERT INTO public.fenced_rows (run_id, attempt) VALUES ($1, $2)', [
          ctx.runId,
          ctx.attempt,
        ]);
        // Another claim's attempt now: this attempt's completion is fenced out.
        await db.pool.query(
          'UPDATE cyclone.cyclone_steps SET attempt = attempt + 1 WHERE run_id = $1',
          [ctx.runId],
        );
        return { attempt: ctx.attempt };
      }),
    },
  },
});

beforeAll(async () => {
  db = await createTestDb();
  await db.pool.query('CREATE TABLE public.fenced_rows (run_id uuid, attempt int)');
});
afterAll(async () => {
  for (const f of cleanup.reverse()) await f().catch(() => {});
  await db?.drop();
});

it.each([
  ['its own step pool (pipelined)', false],
  ['a caller-given pool', true],
])('on %s, a fenced-out completion commits none of the handler writes', async (_, given) => {
  const client = given
    ? new Client({ pool: db.pool })
    : new Client({ connectionString: db.url, poolSize: 2 });
  if (!given) cleanup.push(() => client.close());
  const worker = new Worker({
    client,
    workflows: [Fenced],
    concurrency: 2,
    poolSize: 1,
    pollIntervalMs: 50,
    listen: false,
  });
  cleanup.push(() => worker.stop({ graceMs: 1_000 }));
  await worker.start();
  const runs = [];
  for (let i = 0; i < 3; i++) runs.push((await client.submit(Fenced, {})).runId);
  await expect
    .poll(() => worker.stats.leaseLost + worker.stats.completed, { timeout: 10_000 })
    .toBe(3);
  await worker.stop({ graceMs: 1_000 });
  const { rows } = await db.pool.query(
    'SELECT count(*)::int AS n FROM public.fenced_rows WHERE run_id = ANY($1::uuid[])',
    [runs],
  );
  expect(rows[0].n).toBe(0);
  expect(worker.stats.leaseLost).toBe(3);
  const { rows: steps } = await db.pool.query(
    `SELECT state FROM cyclone.cyclone_steps WHERE run_id = ANY($1::uuid[])`,
    [runs],
  );
  expect(steps.map((s) => s.state)).toEqual(['running', 'running', 'running']);
});
