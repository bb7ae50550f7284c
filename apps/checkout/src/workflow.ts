/**
 * The checkout workflow:
 *
 *                         ┌─► receipt (SendGrid) ──┐
 *                         ├─► sms (Twilio) ────────┤
 *   reserve ─► charge ────┤                        ├─► fulfil ──(timer)──► followUp
 *   (stock)    (Stripe)   └─► approval ────────────┘   (shipping API)      (SendGrid)
 *                             (orders over $100)  └──► refund (Stripe, when it timed out)
 *
 * - `reserve` and `fulfil` write only to PostgreSQL, on `ctx.completionTx()`: their rows commit
 *   with the step's completion or not at all, so they happen exactly once however often the
 *   handler runs.
 * - `charge`, `receipt` and `sms` call a provider through its Cyclone adapter: every call is keyed
 *   by the step (`${runId}:${node}`) and guarded by the idempotency ledger, so a retried, reclaimed
 *   or crashed step never charges, mails or texts twice. What they learn (the payment intent, the
 *   message ids) is written on the completion transaction too.
 * - `fulfil` also books the shipment with a shipping API that takes an idempotency key, through
 *   `@cyclone/http`'s `idempotentFetch` (key `${runId}:fulfil:shipment`): a completed booking is
 *   replayed from the ledger, a lost answer re-sent with the same key.
 * - `approval` is a wait node: an order over `APPROVAL_THRESHOLD_CENTS` waits (no worker held)
 *   for the signal `approved` (`POST /orders/:id/approve`) at most `approvalTimeoutMs`; a smaller
 *   order skips it at once. Approved, or not held: `fulfil` ships. Timed out: `refund` refunds
 *   the charge through Stripe (key `${runId}:refund`) and puts the stock back, and nothing ships.
 * - `followUp` is a durable timer: `followUpDelayMs` after `fulfil` completed, an e-mail asks how
 *   the order went (SendGrid, its own scope: key `${runId}:followUp:follow-up`); only for orders
 *   that shipped.
 *
 * - Flow control (docs/flow-control.md): one `charge` in flight per customer (keyed by e-mail),
 *   and `sms` at most `smsPerSecond` starts per second across every worker (Twilio sends 1
 *   segment per second from a long-code number); a step held back waits without using an
 *   attempt.
 *
 * Every completion-transaction write also appends a row to `checkout.order_events` (no unique
 * constraint), so a duplicate would be visible; the demo checks there is exactly one per
 * (order, node).
 */
import {
  type Context,
  type Json,
  NonRetryableError,
  newAction,
  newWorkflow,
  type Tx,
} from '@cyclone/core';
import { idempotentFetch } from '@cyclone/http';
import { getLedgerEntry, idempotencyKey } from '@cyclone/idempotency';
import { idempotentMail } from '@cyclone/sendgrid';
import { idempotentStripe } from '@cyclone/stripe';
import { idempotentTwilio } from '@cyclone/twilio';
import { z } from 'zod';
import type { Providers } from './providers.js';
import { SKUS } from './schema.js';

/** The run's input: the order as the API accepted it, with the amount it computed. */
export const OrderInput = z.object({
  orderId: z.string(),
  sku: z.enum(SKUS),
  quantity: z.number().int().positive(),
  amountCents: z.number().int().positive(),
  currency: z.string().length(3),
  email: z.string(),
  phone: z.string(),
  paymentMethod: z.string(),
});
export type OrderInput = z.infer<typeof OrderInput>;

/** Orders above this amount (in cents: $100.00) wait for a person's approval. */
export const APPROVAL_THRESHOLD_CENTS = 10_000;

/** Whether an order of `amountCents` is held for approval (the `approval` node's condition). */
export const needsApproval = (amountCents: number): boolean =>
  amountCents > APPROVAL_THRESHOLD_CENTS;

/** The signal that approves a held order. */
export const APPROVAL_SIGNAL = 'approved';

/** The waits of the workflow and of the reconciliation schedule. */
export interface Timings {
  /** From the shipment (`fulfil` completed) to the follow-up e-mail, ms. */
  followUpDelayMs: number;
  /** How long a held order waits for its approval before it is refunded, ms. */
  approvalTimeoutMs: number;
  /** When the payment reconciliation runs (cron, 5 fields, or 6 with seconds first; UTC). */
  reconcileCron: string;
  /** How far back a reconciliation looks at orders and Stripe's payments, ms. */
  reconcileLookbackMs: number;
  /**
   * Text messages sent per second at most, across every worker (the `sms` action's rate limit,
   * docs/flow-control.md): Twilio sends 1 segment per second from a US long-code number.
   */
  smsPerSecond: number;
}

/** A shop's: a follow-up three days after the shipment, a day to approve, reconcile every 15 min. */
export const REAL_TIMINGS: Timings = Object.freeze({
  followUpDelayMs: 3 * 86_400_000,
  approvalTimeoutMs: 86_400_000,
  reconcileCron: '*/15 * * * *',
  reconcileLookbackMs: 86_400_000,
  smsPerSecond: 1,
});

/** The demo's: everything within seconds. */
export const DEMO_TIMINGS: Timings = Object.freeze({
  followUpDelayMs: 1_500,
  approvalTimeoutMs: 4_000,
  reconcileCron: '*/3 * * * * *',
  reconcileLookbackMs: 86_400_000,
  smsPerSecond: 20,
});

/**
 * The timings for this environment: `CHECKOUT_TIMINGS=demo` (what `pnpm demo` sets for the API
 * and the workers), else the real ones. The API and the workers must agree: a node's timer and
 * timeout are fixed when the API submits the run.
 */
export function timingsFromEnv(env: Record<string, string | undefined> = process.env): Timings {
  const v = env.CHECKOUT_TIMINGS;
  if (v === undefined || v === '' || v === 'real') return REAL_TIMINGS;
  if (v === 'demo') return DEMO_TIMINGS;
  throw new Error(`CHECKOUT_TIMINGS must be 'demo' or 'real', got ${JSON.stringify(v)}`);
}

/** Outputs of the steps, as stored and as `ctx.upstream` returns them. */
export interface ChargeOutput {
  paymentIntent: string;
  amount: number;
}
export interface ReceiptOutput {
  messageId: string | null;
}
export interface SmsOutput {
  sid: string;
}
export interface RefundOutput {
  refundId: string;
  amount: number;
}
/**
 * What the `approval` node completes with: the approver's payload (`POST /orders/:id/approve`
 * sends `{ approved: true, by }`; `cyclone signal … approved` without data sends `null`), or
 * the timeout's `{ timedOut: true }`.
 */
export type ApprovalOutput = { approved: true; by: string | null } | { timedOut: true } | null;

/** Whether the approval timed out (false when it came in time, or the order was not held). */
const approvalTimedOut = (up: Record<string, Json>): boolean =>
  (up.approval as { timedOut?: unknown } | null | undefined)?.timedOut === true;

/** Short retries: a failed provider call is tried again within seconds, not minutes. */
const backoff = (attempt: number) =>
  Math.round(Math.min(250 * 2 ** (attempt - 1), 4_000) * (0.75 + Math.random() / 2));

/** Appends the step's business event, on its completion transaction. */
async function recordEvent(tx: Tx, ctx: Context, orderId: string, detail: string): Promise<void> {
  await tx.query(
    'INSERT INTO checkout.order_events (order_id, run_id, node, attempt, detail) VALUES ($1, $2, $3, $4, $5)',
    [orderId, ctx.runId, ctx.node, ctx.attempt, detail],
  );
}

/**
 * Whether this attempt inherits an unknown outcome from an earlier one: the ledger row of the
 * step's key has a call with no recorded outcome (the response was lost, or the worker died
 * mid-call). The adapter settles it (waits out the quiet period, then reconciles or re-sends
 * under the same key); `resolvedUnknown` records how, once the step succeeds.
 */
async function inheritedUnknown(ctx: Context): Promise<{ key: string; calls: number } | undefined> {
  const key = idempotencyKey(ctx);
  const e = await getLedgerEntry(ctx.client, key);
  if (!e) return undefined;
  const open =
    e.phase === 'unknown' ||
    (e.phase === 'started' && e.callStartedAt !== null && e.ownerAttempt < ctx.attempt);
  return open ? { key, calls: e.calls } : undefined;
}

async function resolvedUnknown(
  tx: Tx,
  ctx: Context,
  provider: string,
  before: { key: string; calls: number } | undefined,
): Promise<void> {
  if (!before) return;
  const after = await getLedgerEntry(ctx.client, before.key);
  const resent = (after?.calls ?? 0) > before.calls;
  await tx.query(
    `INSERT INTO checkout.unknown_outcomes (key, run_id, node, provider, resolved_by, attempt)
     VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (key) DO NOTHING`,
    [
      before.key,
      ctx.runId,
      ctx.node,
      provider,
      resent ? 'sent again under the same key' : 'found at the provider, not sent again',
      ctx.attempt,
    ],
  );
}

/**
 * The workflow. `providers` is needed only where steps run (the worker); the API submits runs
 * with the same definition and no providers.
 */
export function checkoutWorkflow(providers?: Providers, timings: Timings = timingsFromEnv()) {
  const p = (): Providers => {
    if (!providers) throw new NonRetryableError('this process has no providers configured');
    return providers;
  };

  const reserve = newAction(
    'reserve',
    async (ctx, input: OrderInput) => {
      const tx = await ctx.completionTx();
      const { rows } = await tx.query<{ available: number }>(
        `UPDATE checkout.inventory SET available = available - $2
         WHERE sku = $1 AND available >= $2 RETURNING available`,
        [input.sku, input.quantity],
      );
      if (!rows[0]) throw new NonRetryableError(`${input.sku} is out of stock`);
      await tx.query(
        `UPDATE checkout.orders SET status = 'reserved', updated_at = now() WHERE order_id = $1`,
        [input.orderId],
      );
      await recordEvent(tx, ctx, input.orderId, `reserved ${input.quantity} × ${input.sku}`);
      return { sku: input.sku, quantity: input.quantity, stockLeft: rows[0].available };
    },
    { backoff },
  );

  const charge = newAction(
    'charge',
    async (ctx, input: OrderInput): Promise<ChargeOutput> => {
      const unknown = await inheritedUnknown(ctx);
      // Key `${runId}:charge`, sent as Stripe's Idempotency-Key and guarded by the ledger.
      // Everything in the request comes from the input: the same on every attempt.
      const pi = await idempotentStripe(p().stripe, ctx, p().stripeOptions).paymentIntents.create({
        amount: input.amountCents,
        currency: input.currency,
        payment_method: input.paymentMethod,
        // A card payment confirmed server-side, no redirect-based methods.
        automatic_payment_methods: { enabled: true, allow_redirects: 'never' },
        confirm: true,
        description: `Order ${input.orderId}`,
        metadata: { order_id: input.orderId },
      });
      if (pi.status !== 'succeeded') {
        throw new NonRetryableError(`payment ${pi.id} of order ${input.orderId} is ${pi.status}`);
      }
      const tx = await ctx.completionTx();
      await tx.query(
        `UPDATE checkout.orders SET status = 'paid', payment_intent = $2, updated_at = now()
         WHERE order_id = $1`,
        [input.orderId, pi.id],
      );
      await recordEvent(tx, ctx, input.orderId, `charged ${pi.amount} ${pi.currency} (${pi.id})`);
      await resolvedUnknown(tx, ctx, 'stripe', unknown);
      return { paymentIntent: pi.id, amount: pi.amount };
    },
    // One charge in flight per customer (by e-mail), however many orders they place at once.
    { backoff, timeout: 60_000, concurrency: { limit: 1, key: (input) => input.email } },
  );

  const receipt = newAction(
    'receipt',
    async (ctx, input: OrderInput): Promise<ReceiptOutput> => {
      const unknown = await inheritedUnknown(ctx);
      const { paymentIntent } = ctx.upstream<ChargeOutput>('charge');
      const sent = await idempotentMail(p().mail, ctx, p().mailOptions).send({
        to: input.email,
        from: p().mailFrom,
        subject: `Your receipt for order ${input.orderId}`,
        text: `Thank you! We charged ${(input.amountCents / 100).toFixed(2)} ${input.currency.toUpperCase()} for ${input.quantity} × ${input.sku} (payment ${paymentIntent}).`,
        customArgs: { order_id: input.orderId },
      });
      const tx = await ctx.completionTx();
      await tx.query(
        'UPDATE checkout.orders SET receipt_message_id = $2, updated_at = now() WHERE order_id = $1',
        [input.orderId, sent.messageId],
      );
      await recordEvent(tx, ctx, input.orderId, `receipt to ${input.email} (${sent.messageId})`);
      await resolvedUnknown(tx, ctx, 'sendgrid', unknown);
      return { messageId: sent.messageId };
    },
    { backoff, timeout: 60_000 },
  );

  const sms = newAction(
    'sms',
    async (ctx, input: OrderInput): Promise<SmsOutput> => {
      const unknown = await inheritedUnknown(ctx);
      const message = await idempotentTwilio(p().twilio, ctx, p().twilioOptions).messages.create({
        to: input.phone,
        from: p().smsFrom,
        // A held order ships only once approved.
        body: needsApproval(input.amountCents)
          ? `Order ${input.orderId} is paid; it ships once approved.`
          : `Order ${input.orderId} is paid and on its way.`,
      });
      const tx = await ctx.completionTx();
      await tx.query(
        'UPDATE checkout.orders SET sms_sid = $2, updated_at = now() WHERE order_id = $1',
        [input.orderId, message.sid],
      );
      await recordEvent(tx, ctx, input.orderId, `sms to ${input.phone} (${message.sid})`);
      await resolvedUnknown(tx, ctx, 'twilio', unknown);
      return { sid: message.sid };
    },
    // The sender's published rate, across every worker; a 429 that still comes snoozes.
    {
      backoff,
      timeout: 60_000,
      rateLimit: { limit: timings.smsPerSecond, periodMs: 1_000 },
    },
  );

  const fulfil = newAction(
    'fulfil',
    async (ctx, input: OrderInput) => {
      const { paymentIntent } = ctx.upstream<ChargeOutput>('charge');
      const shipment = await bookShipment(ctx, input, paymentIntent);
      const tx = await ctx.completionTx();
      await tx.query(
        `UPDATE checkout.orders SET status = 'fulfilled', fulfilled_at = now(), updated_at = now()
         WHERE order_id = $1`,
        [input.orderId],
      );
      await recordEvent(
        tx,
        ctx,
        input.orderId,
        `fulfilled (paid by ${paymentIntent}${shipment ? `, shipment ${shipment}` : ''})`,
      );
      return { fulfilled: true, shipment };
    },
    { backoff, timeout: 60_000 },
  );

  const refund = newAction(
    'refund',
    async (ctx, input: OrderInput): Promise<RefundOutput> => {
      const unknown = await inheritedUnknown(ctx);
      const { paymentIntent } = ctx.upstream<ChargeOutput>('charge');
      // Key `${runId}:refund`: one refund of the whole charge, however often this runs.
      const r = await idempotentStripe(p().stripe, ctx, p().stripeOptions).refunds.create({
        payment_intent: paymentIntent,
        reason: 'requested_by_customer',
        metadata: { order_id: input.orderId },
      });
      const tx = await ctx.completionTx();
      // Nothing ships: the reserved stock goes back.
      await tx.query('UPDATE checkout.inventory SET available = available + $2 WHERE sku = $1', [
        input.sku,
        input.quantity,
      ]);
      await tx.query(
        `UPDATE checkout.orders SET status = 'refunded', refund_id = $2, refunded_at = now(),
           updated_at = now()
         WHERE order_id = $1`,
        [input.orderId, r.id],
      );
      await recordEvent(
        tx,
        ctx,
        input.orderId,
        `refunded ${r.amount} (${r.id}): no approval within ${timings.approvalTimeoutMs} ms`,
      );
      await resolvedUnknown(tx, ctx, 'stripe', unknown);
      return { refundId: r.id, amount: r.amount };
    },
    { backoff, timeout: 60_000 },
  );

  const followUp = newAction(
    'follow-up',
    async (ctx, input: OrderInput): Promise<ReceiptOutput> => {
      const unknown = await inheritedUnknown(ctx);
      // Its own scope: key `${runId}:followUp:follow-up`, apart from the receipt's.
      const mail = idempotentMail(p().mail, ctx, { ...p().mailOptions, scope: 'follow-up' });
      const sent = await mail.send({
        to: input.email,
        from: p().mailFrom,
        subject: `How is your order ${input.orderId}?`,
        text: `Your ${input.quantity} × ${input.sku} shipped a while ago. Is everything as it should be? Just reply to this e-mail.`,
        customArgs: { order_id: input.orderId, kind: 'follow_up' },
      });
      const tx = await ctx.completionTx();
      await tx.query(
        `UPDATE checkout.orders SET follow_up_message_id = $2, followed_up_at = now(),
           updated_at = now()
         WHERE order_id = $1`,
        [input.orderId, sent.messageId],
      );
      await recordEvent(tx, ctx, input.orderId, `follow-up to ${input.email} (${sent.messageId})`);
      await resolvedUnknown(tx, ctx, 'sendgrid', unknown);
      return { messageId: sent.messageId };
    },
    { backoff, timeout: 60_000 },
  );

  /** Books the order's shipment (its id), or nothing when no shipping API is configured. */
  async function bookShipment(
    ctx: Context,
    input: OrderInput,
    paymentIntent: string,
  ): Promise<string | null> {
    const shipping = p().shipping;
    if (!shipping) return null;
    const fetchOnce = idempotentFetch(ctx, { ...shipping.options, scope: 'shipment' });
    const res = await fetchOnce(new URL('shipments', `${shipping.url.replace(/\/$/, '')}/`), {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        ...(shipping.token ? { authorization: `Bearer ${shipping.token}` } : {}),
      },
      // From the input and the upstream output only: the same on every attempt.
      body: JSON.stringify({
        order_id: input.orderId,
        items: [{ sku: input.sku, quantity: input.quantity }],
        payment: paymentIntent,
      }),
    });
    const shipment = (await res.json()) as { id?: unknown };
    return typeof shipment.id === 'string' ? shipment.id : null;
  }

  return newWorkflow('checkout', {
    input: OrderInput,
    nodes: {
      reserve: { action: reserve },
      charge: { action: charge, after: ['reserve'] },
      receipt: { action: receipt, after: ['charge'] },
      sms: { action: sms, after: ['charge'] },
      // Large orders wait for `approved` (no worker held meanwhile); small ones skip it at once.
      approval: {
        waitFor: APPROVAL_SIGNAL,
        after: ['charge'],
        timeoutMs: timings.approvalTimeoutMs,
        when: (run) => needsApproval(run.amountCents),
      },
      // No approval in time: refund; approved or never held: ship. Exactly one of the two runs.
      refund: { action: refund, after: ['approval'], when: (_run, up) => approvalTimedOut(up) },
      fulfil: {
        action: fulfil,
        after: ['receipt', 'sms', 'approval'],
        when: (_run, up) => !approvalTimedOut(up),
      },
      // A skipped fulfil does not skip its downstream nodes: follow up only what shipped.
      followUp: {
        action: followUp,
        after: ['fulfil'],
        delayMs: timings.followUpDelayMs,
        when: (_run, up) => 'fulfil' in up,
      },
    },
  });
}

export type CheckoutWorkflow = ReturnType<typeof checkoutWorkflow>;
