/**
 * The workflow of the crash tests, shared by the test file (the in-process rescuer worker) and
 * the child worker process (stripe-worker.ts). The charge handler calls Stripe through the
 * adapter, then, in the victim process, tells the parent and never returns: the parent SIGKILLs
 * it after the charge and before the step's completion (ARCHITECTURE.md § The crash matrix,
 * row 2).
 */
import { type Context, newAction, newWorkflow } from '@cyclone/core';
import type Stripe from 'stripe';
import { idempotentStripe } from '../../src/index.js';

export interface CrashConfig {
  /** The Stripe client of this process (pointed at the parent's fake). */
  stripe: Stripe;
  /** Tells the parent something (a stdout line in the child). */
  emit: (line: string) => void;
  /** True in the process that must stop after the charge. */
  victim: boolean;
}

let config: CrashConfig | undefined;

/** Sets this process's configuration; call before any worker starts. */
export function configureCrash(c: CrashConfig): void {
  config = c;
}

function cfg(): CrashConfig {
  if (!config) throw new Error('crash-flows: configureCrash() was not called in this process');
  return config;
}

const charge = newAction(
  'stripe_crash_charge',
  async (ctx: Context, input: { amount: number }) => {
    const c = cfg();
    c.emit(`CALLING ${ctx.runId} ${ctx.attempt}`);
    const pi = await idempotentStripe(c.stripe, ctx).paymentIntents.create({
      amount: input.amount,
      currency: 'usd',
      payment_method: 'pm_card_visa',
      confirm: true,
    });
    c.emit(`CHARGED ${ctx.runId} ${ctx.attempt} ${pi.id}`);
    if (c.victim && ctx.attempt === 1) return new Promise<never>(() => {});
    return { paymentIntent: pi.id, attempt: ctx.attempt, pid: process.pid };
  },
  { maxAttempts: 5, backoff: () => 100 },
);

/** One node, `charge`. */
export const CrashCharge = newWorkflow<{ amount: number }>('stripe_crash', {
  nodes: { charge: { action: charge } },
});
