/**
 * The soak's workload: two DAG workflows whose every node writes one business row on its
 * `completionTx` (table `soak_business`, deliberately WITHOUT a unique constraint, so that a
 * second commit would show as a second row instead of being hidden by the database), and whose
 * order nodes call Stripe, SendGrid and Twilio through the adapters.
 *
 * - `soak_order`: reserve → charge (Stripe) → email (SendGrid) ∥ sms (Twilio) → ship. A few
 *   orders use a declining card: their run fails at `charge`, by design.
 * - `soak_batch`: split → four parts (one of them longer than a lease, kept alive by heartbeats;
 *   some open the completion transaction first and hold it while they work) → merge.
 *
 * The handlers run in the worker child processes (worker-main.ts), which install the provider
 * clients and the event reporter with `installWorkerDeps`; the orchestrator only submits.
 */
import { type Context, newAction, newWorkflow } from '@cyclone/core';
import { idempotentMail } from '@cyclone/sendgrid';
import { idempotentStripe } from '@cyclone/stripe';
import { idempotentTwilio, type TwilioMessagingClient } from '@cyclone/twilio';
import type Stripe from 'stripe';
import { z } from 'zod';

/** What a worker process gives the handlers. */
export interface WorkerDeps {
  stripe: Stripe;
  mail: Parameters<typeof idempotentMail>[0];
  twilio: TwilioMessagingClient;
  /** Quiet period of the SendGrid and Twilio adapters (ms): longer than any stall. */
  quietPeriodMs: number;
  /** Called as each handler starts (the orchestrator measures recovery with it). */
  onStart(ctx: Context): void;
  /** The worker's id, written with each business row. */
  workerId(): string;
}

let deps: WorkerDeps | undefined;

/** Installs the worker's provider clients and reporter (worker-main.ts). */
export function installWorkerDeps(d: WorkerDeps): void {
  deps = d;
}

function need(): WorkerDeps {
  if (!deps) throw new Error('soak handlers run only in a soak worker (installWorkerDeps)');
  return deps;
}

/** The business table and its index (no unique constraint: see the module comment). */
export const BUSINESS_DDL = `
CREATE TABLE IF NOT EXISTS soak_business (
  id        bigserial   PRIMARY KEY,
  run_id    uuid        NOT NULL,
  node      text        NOT NULL,
  attempt   int         NOT NULL,
  worker    text        NOT NULL,
  at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS soak_business_step ON soak_business (run_id, node);`;

/** Card that pays, and the test card that declines (PROVIDERS.md § 5.1). */
export const GOOD_CARD = 'pm_card_visa';
export const DECLINING_CARD = 'pm_card_chargeDeclined';

/** The sender of every e-mail and SMS. */
export const MAIL_FROM = 'soak@example.com';
export const SMS_FROM = '+15005550006';

/** The SMS body for a key: the key in it lets the checker count messages per key. */
export const smsBody = (key: string) => `soak ${key}`;

/** Handler options shared by every node: quick retries, many attempts, a hard timeout. */
const OPTIONS = {
  maxAttempts: 80,
  backoff: (attempt: number) => Math.min(150 * attempt, 2_000) + Math.floor(Math.random() * 100),
  timeout: 30_000,
};

/** Sleeps `ms`, cut short (rejecting with the reason) when `signal` aborts. */
function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const t = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal.reason);
    };
    signal.addEventListener('abort', onAbort, { once: true });
  });
}

/** Writes this step's business row on the completion transaction. */
async function writeBusinessRow(ctx: Context): Promise<void> {
  const tx = await ctx.completionTx();
  await tx.query(
    'INSERT INTO soak_business (run_id, node, attempt, worker) VALUES ($1, $2, $3, $4)',
    [ctx.runId, ctx.node, ctx.attempt, need().workerId()],
  );
}

/** A node that only writes its business row, after `workMs` of work. */
const dbStep = (name: string, workMs: (ctx: Context) => number, txFirst = false) =>
  newAction(
    name,
    async (ctx) => {
      need().onStart(ctx);
      if (txFirst) await ctx.completionTx(); // held across the work: a connection in a transaction
      await sleep(workMs(ctx), ctx.signal);
      await writeBusinessRow(ctx);
      return { node: ctx.node, attempt: ctx.attempt };
    },
    OPTIONS,
  );

/** A deterministic number in [0, 1) from a string (so work sizes follow the run, not chance). */
export function unit(s: string): number {
  let h = 2166136261;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 16777619);
  return (h >>> 0) / 2 ** 32;
}

export const OrderInput = z.object({
  orderId: z.string().min(1),
  amount: z.number().int().positive(),
  email: z.string(),
  phone: z.string(),
  declined: z.boolean(),
});
export type OrderInput = z.infer<typeof OrderInput>;

const Charge = newAction(
  'soak_charge',
  async (ctx, input: { amount: number; card: string }) => {
    const d = need();
    d.onStart(ctx);
    const pi = await idempotentStripe(d.stripe, ctx).paymentIntents.create({
      amount: input.amount,
      currency: 'usd',
      payment_method: input.card,
      confirm: true,
    });
    await writeBusinessRow(ctx);
    return { paymentIntent: pi.id, status: pi.status };
  },
  { ...OPTIONS, input: z.object({ amount: z.number().int().positive(), card: z.string() }) },
);

const Email = newAction(
  'soak_email',
  async (ctx, input: { to: string; orderId: string }) => {
    const d = need();
    d.onStart(ctx);
    const sent = await idempotentMail(d.mail, ctx, {
      onUnknown: 'reconcile',
      quietPeriodMs: d.quietPeriodMs,
    }).send({
      to: input.to,
      from: MAIL_FROM,
      subject: `Your order ${input.orderId}`,
      text: `Thanks for order ${input.orderId}.`,
    });
    await writeBusinessRow(ctx);
    return sent;
  },
  OPTIONS,
);

const Sms = newAction(
  'soak_sms',
  async (ctx, input: { to: string }) => {
    const d = need();
    d.onStart(ctx);
    const sms = await idempotentTwilio(d.twilio, ctx, {
      onUnknown: 'reconcile',
      quietPeriodMs: d.quietPeriodMs,
    }).messages.create({ to: input.to, from: SMS_FROM, body: smsBody(`${ctx.runId}:${ctx.node}`) });
    await writeBusinessRow(ctx);
    return { sid: sms.sid };
  },
  OPTIONS,
);

export const Order = newWorkflow<OrderInput>('soak_order', {
  input: OrderInput,
  nodes: {
    reserve: { action: dbStep('soak_reserve', (c) => 5 + unit(c.runId) * 60) },
    charge: {
      action: Charge,
      after: ['reserve'],
      input: (run) => ({ amount: run.amount, card: run.declined ? DECLINING_CARD : GOOD_CARD }),
    },
    email: {
      action: Email,
      after: ['charge'],
      input: (run) => ({ to: run.email, orderId: run.orderId }),
    },
    sms: { action: Sms, after: ['charge'], input: (run) => ({ to: run.phone }) },
    ship: { action: dbStep('soak_ship', () => 5), after: ['email', 'sms'] },
  },
});

export const BatchInput = z.object({ batchId: z.string().min(1), longMs: z.number().int() });
export type BatchInput = z.infer<typeof BatchInput>;

export const Batch = newWorkflow<BatchInput>('soak_batch', {
  input: BatchInput,
  nodes: {
    split: { action: dbStep('soak_split', () => 5) },
    p0: { action: dbStep('soak_part', (c) => 20 + unit(`${c.runId}0`) * 300), after: ['split'] },
    p1: {
      action: dbStep('soak_part_tx', (c) => 20 + unit(`${c.runId}1`) * 400, true),
      after: ['split'],
    },
    p2: { action: dbStep('soak_part2', (c) => 20 + unit(`${c.runId}2`) * 300), after: ['split'] },
    // Longer than a lease on purpose: only the heartbeat keeps it.
    p3: {
      action: newAction(
        'soak_long',
        async (ctx, input: BatchInput) => {
          need().onStart(ctx);
          await sleep(input.longMs, ctx.signal);
          await writeBusinessRow(ctx);
          return { node: ctx.node };
        },
        OPTIONS,
      ),
      after: ['split'],
    },
    merge: { action: dbStep('soak_merge', () => 5, true), after: ['p0', 'p1', 'p2', 'p3'] },
  },
});

/** Every workflow of the soak. */
export const WORKFLOWS = [Order, Batch] as const;

/** Nodes that call a provider, and which. */
export const PROVIDER_NODES = { charge: 'stripe', email: 'sendgrid', sms: 'twilio' } as const;
export type Provider = (typeof PROVIDER_NODES)[keyof typeof PROVIDER_NODES];
