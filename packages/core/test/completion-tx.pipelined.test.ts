/**
 * A completionTx on the worker's own (pipelined) step pool sends BEGIN with the handler's first
 * query. The paths without a first query: a handler that opens the transaction and returns
 * (BEGIN then goes out with the completion's turn) completes, and one that opens it and throws
 * gives its connection back without a transaction to roll back. The step pool has one
 * connection, so a connection kept by either path would hold up every later step.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import { Client, newAction, newWorkflow, Worker } from '../src/index.js';
import { createTestDb, type TestDb } from './support/db.js';

let db: TestDb;
let client: Client;
let worker: Worker;

const opensOnly = newAction(
  'pipelined_opens_only',
  async (ctx, input: { fail: boolean }) => {
    await ctx.completionTx();
    if (input.fail && ctx.attempt === 1) throw new Error('fails once after opening');
    return { attempt: ctx.attempt };
  },
  { backoff: () => 0 },
);
const writes = newAction('pipelined_writes', async (ctx) => {
  const tx = await ctx.completionTx();
  await tx.query('INSERT INTO public.pipelined_rows (run_id) VALUES ($1)', [ctx.runId]);
  const { rows } = await tx.query<{ n: number }>(
    'SELECT count(*)::int AS n FROM public.pipelined_rows WHERE run_id = $1',
    [ctx.runId],
  );
  return { seen: rows[0]?.n };
});
const OpensOnly = newWorkflow<{ fail: boolean }>('pipelined_opens_only', {
  nodes: { only: { action: opensOnly } },
});
const Writes = newWorkflow('pipelined_writes', { nodes: { only: { action: writes } } });

beforeAll(async () => {
  db = await createTestDb();
  await db.pool.query('CREATE TABLE public.pipelined_rows (run_id uuid PRIMARY KEY)');
  client = new Client({ connectionString: db.url, poolSize: 2 });
  worker = new Worker({
    client,
    workflows: [OpensOnly, Writes],
    concurrency: 4,
    poolSize: 1,
    pollIntervalMs: 50,
  });
  await worker.start();
});
afterAll(async () => {
  await worker?.stop({ graceMs: 1_000 });
  await client?.close();
  await db?.drop();
});

it('opened without a query, completed or failed: each run completes, no connection kept', async () => {
  const runs = [];
  for (let i = 0; i < 6; i++) {
    runs.push(await client.submit(OpensOnly, { fail: i % 2 === 1 }));
    runs.push(await client.submit(Writes, {}));
  }
  for (const { runId } of runs) {
    const run = await client.waitForRun(runId, { timeoutMs: 20_000, pollMs: 50 });
    expect(run.state).toBe('completed');
  }
  const { rows } = await db.pool.query('SELECT count(*)::int AS n FROM public.pipelined_rows');
  expect(rows[0].n).toBe(6);
  // The write's own row was visible to its second query: both ran in the one transaction.
  const outputs = await Promise.all(
    runs.filter((_, i) => i % 2 === 1).map(({ runId }) => client.getRun(runId)),
  );
  for (const run of outputs) expect(run?.steps[0]?.output).toEqual({ seen: 1 });
  const failed = await Promise.all(
    runs.filter((_, i) => i % 4 === 2).map(({ runId }) => client.getRun(runId)),
  );
  for (const run of failed) expect(run?.steps[0]?.attempt).toBe(2);
});
