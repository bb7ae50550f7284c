/**
 * The workflow of the failover test (failover.test.ts), run by its worker processes
 * (failover-worker.ts): `reserve` → `charge` → `ship`, each writing one row on its step's
 * `completionTx` into `failover_business` (no unique constraint: a second commit would be a
 * second row). `charge` calls the fake provider through `once` (no deduplication by key at the
 * provider, so a second call would be a second effect), records `succeeded` on the completionTx,
 * and reconciles an unknown outcome by looking the key up at the provider. Every handler waits
 * 50–300 ms first, so that steps are in flight when the primary dies.
 */
import { type Context, newAction, newWorkflow } from '@cyclone/core';
import { once } from '../../src/index.js';
import { type EffectResponse, findEffects, postEffect } from './provider.js';

export interface FailoverOrder {
  orderId: string;
  amount: number;
}

/** The business table (created by the test). */
export const FAILOVER_BUSINESS = `
CREATE TABLE IF NOT EXISTS failover_business (
  id bigserial PRIMARY KEY, run_id uuid NOT NULL, node text NOT NULL, attempt int NOT NULL,
  worker text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())`;

let providerUrl: string | undefined;
let workerLabel = 'in-process';

/** Sets this process's provider URL and worker label; call before its worker starts. */
export function configureFailover(c: { providerUrl: string; worker: string }): void {
  providerUrl = c.providerUrl;
  workerLabel = c.worker;
}

const pause = (ctx: Context) =>
  new Promise<void>((resolve) => {
    const t = setTimeout(resolve, 50 + Math.floor(Math.random() * 250));
    ctx.signal.addEventListener('abort', () => {
      clearTimeout(t);
      resolve();
    });
  });

async function writeRow(ctx: Context): Promise<void> {
  const tx = await ctx.completionTx();
  await tx.query(
    'INSERT INTO failover_business (run_id, node, attempt, worker) VALUES ($1, $2, $3, $4)',
    [ctx.runId, ctx.node, ctx.attempt, workerLabel],
  );
}

const reserve = newAction(
  'failover_reserve',
  async (ctx: Context, input: FailoverOrder) => {
    await pause(ctx);
    await writeRow(ctx);
    return { reserved: input.orderId };
  },
  { maxAttempts: 50, backoff: () => 100 },
);

const charge = newAction(
  'failover_charge',
  async (ctx: Context, input: FailoverOrder) => {
    const url = providerUrl;
    if (!url) throw new Error('failover-flows: configureFailover() was not called');
    await pause(ctx);
    const res = await once(
      ctx,
      {
        request: { amount: input.amount },
        provider: 'fake',
        operation: 'POST /effects',
        useCompletionTx: true,
        quietPeriodMs: 1_000,
        onUnknown: async (key) => {
          const found = await findEffects(url, key);
          return found.length === 1 ? found[0] : undefined;
        },
        reference: (r: EffectResponse) => r.id,
      },
      (key, info) => postEffect(url, key, { amount: input.amount }, info.signal),
    );
    await writeRow(ctx);
    return { effectId: res.id };
  },
  { maxAttempts: 50, backoff: () => 100 },
);

const ship = newAction(
  'failover_ship',
  async (ctx: Context) => {
    await pause(ctx);
    await writeRow(ctx);
    return { shipped: true };
  },
  { maxAttempts: 50, backoff: () => 100 },
);

export const FailoverFlow = newWorkflow<FailoverOrder>('failover_order', {
  nodes: {
    reserve: { action: reserve },
    charge: { action: charge, after: ['reserve'] },
    ship: { action: ship, after: ['charge'] },
  },
});

/** The nodes of `FailoverFlow`. */
export const FAILOVER_NODES = ['reserve', 'charge', 'ship'] as const;
