/**
 * The workflow of the crash tests (tests 1 and 7), shared by the test files (in-process rescuer
 * workers) and the child worker process (crash-worker.ts). Its handler charges through the fake
 * provider under `once`, writes a business row on the step's completionTx, and — in the victim
 * process, on attempt 1 — stops right after the provider call and before the step completes, so
 * the parent can SIGKILL it there.
 */

import { type Context, newAction, newWorkflow } from '@cyclone/core';
import type pg from 'pg';
import { once } from '../../src/index.js';
import { type EffectResponse, postEffect } from './provider.js';

export interface ChargeInput {
  amount: number;
  /** Record `succeeded` on completionTx (test 7) or at once (test 1). */
  useCompletionTx: boolean;
}

export interface CrashConfig {
  providerUrl: string;
  /** Tells the parent something (a stdout line in the child). */
  emit: (line: string) => void;
  /** True in the process that must stop after the call. */
  victim: boolean;
}

let config: CrashConfig | undefined;

/** Sets this process's configuration; call before a worker starts. */
export function configureCrash(c: CrashConfig): void {
  config = c;
}

/** The business table written on completionTx (created by the test file). */
export const BUSINESS_TABLE = `
CREATE TABLE IF NOT EXISTS business (
  id bigserial PRIMARY KEY, run_id uuid NOT NULL, node text NOT NULL, attempt int NOT NULL,
  effect_id text NOT NULL)`;

/** Counts business rows of a run. */
export async function businessRows(pool: pg.Pool, runId: string): Promise<number> {
  const { rows } = await pool.query('SELECT count(*)::int AS n FROM business WHERE run_id = $1', [
    runId,
  ]);
  return rows[0].n;
}

const charge = newAction(
  'idem_charge',
  async (ctx: Context, input: ChargeInput) => {
    const c = config;
    if (!c) throw new Error('crash-flows: configureCrash() was not called in this process');
    const res = await once(
      ctx,
      {
        request: { amount: input.amount },
        provider: 'fake',
        operation: 'POST /effects',
        useCompletionTx: input.useCompletionTx,
        onUnknown: 'recall',
        quietPeriodMs: 300,
        reference: (r: EffectResponse) => r.id,
      },
      (key) => postEffect(c.providerUrl, key, { amount: input.amount }),
    );
    const tx = await ctx.completionTx();
    await tx.query(
      'INSERT INTO business (run_id, node, attempt, effect_id) VALUES ($1, $2, $3, $4)',
      [ctx.runId, ctx.node, ctx.attempt, res.id],
    );
    if (c.victim && ctx.attempt === 1) {
      c.emit(`AFTER_CALL ${ctx.runId} ${ctx.attempt}`);
      return new Promise<never>(() => {});
    }
    return { effectId: res.id };
  },
  { maxAttempts: 20, backoff: () => 50 },
);

export const ChargeFlow = newWorkflow<ChargeInput>('idem_crash_charge', {
  nodes: { charge: { action: charge } },
});
