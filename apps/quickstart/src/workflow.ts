/**
 * The demo's workflow: an order.
 *
 *            ┌─► charge ─┐
 *   reserve ─┤           ├─► fulfil
 *            └─► email ──┘
 *
 * Every step writes its business row on `ctx.completionTx()`: the row commits in the same
 * transaction that marks the step completed, or not at all. So however often a handler runs
 * (it runs at least once; a killed worker's steps run again), each (run, node) has exactly one
 * row in `quickstart.effects`. Each call is also logged in `quickstart.calls` outside that
 * transaction, the way an external API call would happen, to show the re-runs.
 */
import { type Client, type Context, newAction, newWorkflow } from '@cyclone/core';
import { z } from 'zod';

/** The demo's own tables, next to Cyclone's (schema `cyclone`). Safe to run again. */
export async function createTables(client: Client): Promise<void> {
  await client.pool.query(`
    CREATE SCHEMA IF NOT EXISTS quickstart;
    CREATE TABLE IF NOT EXISTS quickstart.effects (
      id         bigserial PRIMARY KEY,
      batch      text NOT NULL,
      run_id     uuid NOT NULL,
      node       text NOT NULL,
      attempt    int  NOT NULL,
      what       text NOT NULL,
      created_at timestamptz NOT NULL DEFAULT now()
    );
    -- Deliberately no unique (run_id, node): a duplicate would show, not be swallowed.
    CREATE INDEX IF NOT EXISTS effects_batch ON quickstart.effects (batch);
    CREATE TABLE IF NOT EXISTS quickstart.calls (
      id         bigserial PRIMARY KEY,
      batch      text NOT NULL,
      run_id     uuid NOT NULL,
      node       text NOT NULL,
      attempt    int  NOT NULL,
      pid        int  NOT NULL,
      created_at timestamptz NOT NULL DEFAULT now()
    );
    CREATE INDEX IF NOT EXISTS calls_batch ON quickstart.calls (batch);`);
}

const OrderInput = z.object({
  batch: z.string(),
  orderId: z.string(),
  item: z.string(),
  quantity: z.number().int().positive(),
  amountCents: z.number().int().positive(),
  email: z.string(),
});
export type OrderInput = z.infer<typeof OrderInput>;

/** A step's work: log the call, take a while (so a kill lands mid-step), write the effect. */
async function work(ctx: Context, input: OrderInput, what: string): Promise<void> {
  // Outside the completion transaction, like a call to another system: every attempt leaves one.
  await logCall(ctx, input.batch);
  const tx = await ctx.completionTx();
  await sleep(150 + Math.random() * 350, ctx.signal);
  await tx.query(
    'INSERT INTO quickstart.effects (batch, run_id, node, attempt, what) VALUES ($1, $2, $3, $4, $5)',
    [input.batch, ctx.runId, ctx.node, ctx.attempt, what],
  );
}

/** Set by the worker process: the pool the call log is written with (autocommit). */
let callLog: Client | undefined;
export function setCallLog(client: Client): void {
  callLog = client;
}
async function logCall(ctx: Context, batch: string): Promise<void> {
  await callLog?.pool.query(
    'INSERT INTO quickstart.calls (batch, run_id, node, attempt, pid) VALUES ($1, $2, $3, $4, $5)',
    [batch, ctx.runId, ctx.node, ctx.attempt, process.pid],
  );
}

export const Reserve = newAction('reserve', async (ctx, input: OrderInput) => {
  await work(ctx, input, `reserved ${input.quantity} × ${input.item}`);
  return { reserved: input.quantity };
});

export const Charge = newAction('charge', async (ctx, input: OrderInput) => {
  // A real payment call would send this key (stable across attempts) so the provider dedupes it.
  const idempotencyKey = `${ctx.runId}:${ctx.node}`;
  await work(ctx, input, `charged ${input.amountCents} cents (key ${idempotencyKey})`);
  return { chargeId: `ch_${ctx.runId.slice(0, 8)}` };
});

export const Email = newAction('email', async (ctx, input: OrderInput) => {
  // The transactional outbox: the message row commits with the step; a sender delivers it.
  await work(ctx, input, `queued receipt to ${input.email}`);
  return { queued: true };
});

export const Fulfil = newAction('fulfil', async (ctx, input: OrderInput) => {
  const { chargeId } = ctx.upstream<{ chargeId: string }>('charge');
  await work(ctx, input, `shipped order ${input.orderId} paid by ${chargeId}`);
  return { shipped: true };
});

export const Order = newWorkflow('order', {
  input: OrderInput,
  nodes: {
    reserve: { action: Reserve },
    charge: { action: Charge, after: ['reserve'] },
    email: { action: Email, after: ['reserve'] },
    fulfil: { action: Fulfil, after: ['charge', 'email'] },
  },
});

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const t = setTimeout(done, ms);
    function done() {
      signal.removeEventListener('abort', abort);
      resolve();
    }
    function abort() {
      clearTimeout(t);
      reject(signal.reason);
    }
    signal.addEventListener('abort', abort, { once: true });
  });
}
