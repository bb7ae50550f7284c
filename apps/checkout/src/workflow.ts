/**
 * The checkout workflow:
 *
 *                         ┌─► receipt (SendGrid) ─┐
 *   reserve ─► charge ────┤                       ├─► fulfil
 *   (stock)    (Stripe)   └─► sms (Twilio) ───────┘   (shipping API)
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
 *
 * Every completion-transaction write also appends a row to `checkout.order_events` (no unique
 * constraint), so a duplicate would be visible; the demo checks there is exactly one per
 * (order, node).
 */
import { type Context, NonRetryableError, newAction, newWorkflow, type Tx } from '@cyclone/core';
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
export function checkoutWorkflow(providers?: Providers) {
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
    { backoff, timeout: 60_000 },
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
        body: `Order ${input.orderId} is paid and on its way.`,
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
    { backoff, timeout: 60_000 },
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
      fulfil: { action: fulfil, after: ['receipt', 'sms'] },
    },
  });
}

export type CheckoutWorkflow = ReturnType<typeof checkoutWorkflow>;

/** The nodes of a checkout run, in order. */
export const NODES = ['reserve', 'charge', 'receipt', 'sms', 'fulfil'] as const;
