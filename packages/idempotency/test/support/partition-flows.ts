/**
 * The workflows of the partition test (partition.netns.test.ts), shared by the test (to submit)
 * and its worker hosts (partition-worker.ts, which calls `configurePartition` first).
 *
 * `partition_pay`'s handler charges the fake provider under `once` (recorded on the step's
 * completionTx), writes a business row on the completionTx, and — in the victim, on attempt 1 —
 * waits there, transaction open, until `HOLD_FILE` exists; then sends a receipt under `once`
 * (a late provider call) and returns (a late completion).
 * `partition_probe` is new work that only the victim runs.
 */
import { existsSync } from 'node:fs';
import { type Context, newAction, newWorkflow } from '@cyclone/core';
import { once } from '../../src/index.js';

/** A host's part: where the provider is, the file that ends the hold, whether it is the victim. */
export interface PartitionConfig {
  providerUrl: string;
  holdFile: string;
  victim: boolean;
  /** Tells the test something (a stdout line). */
  emit: (line: string) => void;
}

let config: PartitionConfig | undefined;

/** Sets this process's part; call before its worker starts. */
export function configurePartition(c: PartitionConfig): void {
  config = c;
}

function part(): PartitionConfig {
  if (!config) throw new Error('partition-flows: configurePartition() was not called');
  return config;
}

/** POSTs one effect to the fake provider under `key` (its Idempotency-Key). */
async function postEffect(key: string, body: object): Promise<{ id: string }> {
  const res = await fetch(`${part().providerUrl}/effects`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': key },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(5_000),
  });
  if (!res.ok) throw new Error(`provider answered ${res.status}`);
  return (await res.json()) as { id: string };
}

const onceOptions = (operation: string, request: object) => ({
  request: request as Record<string, number>,
  provider: 'fake',
  operation,
  useCompletionTx: true,
  onUnknown: 'recall' as const,
  quietPeriodMs: 300,
  reference: (r: { id: string }) => r.id,
});

const pay = newAction(
  'partition_pay',
  async (ctx: Context, input: { amount: number }) => {
    const { victim, holdFile, emit } = part();
    const charge = await once(ctx, onceOptions('charge', { amount: input.amount }), (key) =>
      postEffect(key, { op: 'charge', amount: input.amount }),
    );
    const tx = await ctx.completionTx();
    await tx.query(
      'INSERT INTO partition_business (run_id, node, attempt, host, effect_id) VALUES ($1, $2, $3, $4, $5)',
      [ctx.runId, ctx.node, ctx.attempt, victim ? 'victim' : 'rescuer', charge.id],
    );
    if (victim && ctx.attempt === 1) {
      emit(`HOLD ${ctx.runId} ${ctx.attempt}`);
      while (!existsSync(holdFile)) await new Promise((r) => setTimeout(r, 50));
      emit(`LATE ${ctx.runId} receipt`);
    }
    const receipt = await once(
      ctx,
      { ...onceOptions('receipt', { amount: input.amount }), scope: 'receipt' },
      (key) => postEffect(key, { op: 'receipt', amount: input.amount }),
    );
    if (victim && ctx.attempt === 1) emit(`LATE ${ctx.runId} complete`);
    return { charge: charge.id, receipt: receipt.id };
  },
  { maxAttempts: 50, backoff: () => 200 },
);

/** One run per payment; its only node holds the step in the victim. */
export const PayFlow = newWorkflow('partition_pay', { nodes: { pay: { action: pay } } });

/** New work only the victim runs: how soon it works again after the heal. */
export const ProbeFlow = newWorkflow('partition_probe', {
  nodes: {
    probe: {
      action: newAction('partition_probe', async (ctx: Context) => {
        const tx = await ctx.completionTx();
        await tx.query(
          "INSERT INTO partition_business (run_id, node, attempt, host, effect_id) VALUES ($1, $2, $3, 'victim', 'probe')",
          [ctx.runId, ctx.node, ctx.attempt],
        );
        return null;
      }),
    },
  },
});
