/**
 * The README's API tour as a program: `pnpm --filter @cyclone/example-quickstart tour`.
 * Uses DATABASE_URL, or else the embedded PostgreSQL under .cyclone/. Keep it in step with the
 * README's "A tour of the API" (the typecheck compiles this file).
 */
import { resolve } from 'node:path';
import {
  Client,
  NonRetryableError,
  newAction,
  newSchedule,
  newWorkflow,
  Worker,
} from '@cyclone/core';
import { resolveDatabaseUrl } from '@cyclone/core/embedded';
import { z } from 'zod';

// An action: a named handler. `input` validates what it receives.
const Charge = newAction(
  'charge',
  async (ctx, input: { amount: number }) => {
    if (input.amount > 10_000) throw new NonRetryableError('amount over the limit'); // discarded at once
    // Exactly once: this row commits with the step's completion, or not at all.
    const tx = await ctx.completionTx();
    await tx.query('INSERT INTO tour_payments (run_id, node, amount) VALUES ($1, $2, $3)', [
      ctx.runId,
      ctx.node,
      input.amount,
    ]);
    return { charged: input.amount }; // stored as the step's output
  },
  { input: z.object({ amount: z.number().int().positive() }), timeout: 30_000, maxAttempts: 10 },
);

// Outside Postgres, `${runId}:${node}` is the idempotency key: stable across every retry.
const SendReceipt = newAction('send-receipt', async (ctx, input: { to: string }) => {
  ctx.log.info({ to: input.to, key: `${ctx.runId}:${ctx.node}` }, 'receipt sent');
  return { sent: true };
});
const Invoice = newAction('invoice', async (ctx) => ({
  invoiced: ctx.upstream<{ charged: number }>('charge').charged,
}));
const Fulfil = newAction('fulfil', async () => ({ shipped: true }));

// A workflow: a DAG. `after` names upstream nodes; `input` maps the run's input (and upstream
// outputs) to the action's input. Cycles, unknown or duplicate nodes fail here, at definition.
const Checkout = newWorkflow('checkout', {
  input: z.object({ orderId: z.string(), amount: z.number().int(), email: z.string() }),
  nodes: {
    charge: { action: Charge, input: (run) => ({ amount: run.amount }) },
    receipt: { action: SendReceipt, after: ['charge'], input: (run) => ({ to: run.email }) }, // fan-out …
    invoice: { action: Invoice, after: ['charge'] },
    fulfil: { action: Fulfil, after: ['receipt', 'invoice'] }, // … and fan-in
  },
});

// A cron schedule: declared in code, carried by the workers; each fire time makes one run.
const BuildReport = newAction('build-report', async (_ctx, input: { day: string }) => ({
  day: input.day,
}));
const Report = newWorkflow('report', {
  input: z.object({ day: z.string() }),
  nodes: { build: { action: BuildReport } },
});
const Nightly = newSchedule('nightly-report', {
  cron: '0 3 * * *', // 03:00 every day, on the wall clock of `timezone`
  timezone: 'Europe/Paris',
  workflow: Report,
  input: (fireAt) => ({ day: fireAt.toISOString().slice(0, 10) }),
});

// .cyclone/ where the command was typed (pnpm runs scripts in the package's folder; INIT_CWD).
const { connectionString, stop } = await resolveDatabaseUrl({
  dir: resolve(process.env.INIT_CWD ?? process.cwd(), '.cyclone'),
});
const client = new Client({ connectionString });
await client.migrate(); // or `cyclone migrate`
await client.pool.query(
  'CREATE TABLE IF NOT EXISTS tour_payments (run_id uuid, node text, amount int, PRIMARY KEY (run_id, node))',
);

const worker = new Worker({
  client,
  workflows: [Checkout, Report],
  schedules: [Nightly],
  concurrency: 10,
  leaseMs: 30_000,
});
await worker.start();

const order = { orderId: `o-${Date.now()}`, amount: 1999, email: 'a@example.com' };
const { runId } = await client.submit(Checkout, order); // always a new run
// At most one run per (workflow, key); the same key with another input is an error.
const once = await client.submitOnce(Checkout, `order-${order.orderId}`, order);
const again = await client.submitOnce(Checkout, `order-${order.orderId}`, order);
console.log('submitOnce:', once.created, again.created, once.runId === again.runId); // true false true

// Transactional enqueue: the run exists only if your transaction commits.
const pg = await client.pool.connect();
await pg.query('BEGIN');
await client.submit(Checkout, { ...order, orderId: `${order.orderId}-tx` }, { tx: pg });
await pg.query('COMMIT');
pg.release();

const run = await client.waitForRun(runId); // or client.getRun(runId): state, steps, errors
console.log(run.state, run.steps.map((s) => `${s.node}:${s.state}`).join(' '));

// Later: a delayed run's roots wait `scheduled` until PostgreSQL's clock reaches its time
// (`runAt: Date`, or `delayMs` after the submit); every submit form takes both.
const later = { ...order, orderId: `${order.orderId}-later` };
const delayed = await client.submit(Checkout, later, { delayMs: 1_000 });
console.log('delayed:', (await client.getRun(delayed.runId)).steps[0]?.state); // scheduled
await client.triggerSchedule('nightly-report'); // one run of the schedule now, outside its cron
const { createdAt, steps } = await client.waitForRun(delayed.runId);
console.log('submitted', createdAt, 'started', steps[0]?.startedAt); // a second apart
const nightly = (await client.listSchedules()).find((s) => s.name === 'nightly-report');
console.log('nightly-report: next fire', nightly?.nextFireAt, 'last run', nightly?.lastRunId);

// A charge over the limit is discarded; downstream nodes wait; the run fails.
const big = await client.submit(Checkout, { ...order, amount: 20_000 });
console.log('over the limit:', (await client.waitForRun(big.runId)).state); // failed
await client.retry(big.runId, 'charge'); // reopen the discarded node in place; attempts keep counting
// (it would fail again: cancel it; racing the worker's attempt 2, which may log that its failure
// was not recorded because the cancel took the step first)
await client.cancel(big.runId);
await client.retryAll(big.runId); // every discarded or cancelled node of the run
await client.cancel(big.runId);

await worker.stop(); // stops claiming, lets in-flight handlers finish (bounded)
await client.close();
await stop();
