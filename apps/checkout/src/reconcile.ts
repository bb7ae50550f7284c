/**
 * The payment reconciliation: a cron schedule (`reconcile-payments`, carried by every worker;
 * each fire time makes exactly one run whatever the number of workers) whose workflow compares
 * Stripe's payments with the shop's orders, both ways:
 *
 * - every succeeded payment intent of the window (listed at Stripe) belongs to an order that
 *   recorded it, for the same amount and currency; a refund at Stripe belongs to an order that
 *   recorded its refund, and refunds the whole charge once;
 * - every order of the window that recorded a payment (or a refund) has it at Stripe.
 *
 * Work in flight is not a discrepancy: an order is read before Stripe is listed (so whatever it
 * recorded is already at Stripe), and a payment or refund that Stripe has and the order has not
 * recorded yet is `pending` while the order's run is still running (its step may be about to
 * commit), and so is a refund an order recorded after Stripe's refunds were listed (the first
 * read had the order unrefunded). Anything else is a discrepancy: a second charge, a charge
 * nobody recorded, an amount that differs, a refund missing on one side. The report is a row of
 * `checkout.reconciliations`, written on the step's completion transaction, and the step's output.
 */
import {
  type Client,
  NonRetryableError,
  newAction,
  newSchedule,
  newWorkflow,
  RunNotFoundError,
} from '@cyclone/core';
import type Stripe from 'stripe';
import { z } from 'zod';
import type { Providers } from './providers.js';
import { type Timings, timingsFromEnv } from './workflow.js';

/** The run's input: the fire time it reconciles at. */
export const ReconcileInput = z.object({ fireAt: z.string() });
export type ReconcileInput = z.infer<typeof ReconcileInput>;

/** One thing Stripe and the orders disagree on. */
export interface Discrepancy {
  kind:
    | 'charge_not_recorded'
    | 'second_charge'
    | 'charge_for_unknown_order'
    | 'amount_mismatch'
    | 'order_paid_without_charge'
    | 'refund_not_recorded'
    | 'order_refunded_without_refund'
    | 'partial_or_repeated_refund';
  orderId: string | null;
  paymentIntent: string | null;
  detail: string;
}

/** What one reconciliation found (its output, and its row in `checkout.reconciliations`). */
export interface ReconcileReport {
  fireAt: string;
  /** The window's start: the lookback, or the Stripe account's first use if later. */
  since: string;
  /** Succeeded payment intents at Stripe in the window that carry an order id. */
  charges: number;
  /** Refunds at Stripe in the window. */
  refunds: number;
  /** Orders of the window that recorded a payment. */
  orders: number;
  /** Charges that match their order (amount, currency and refund state). */
  matched: number;
  /** Payments and refunds Stripe has and the order's running run has not recorded yet. */
  pending: number;
  discrepancies: Discrepancy[];
}

/** Orders created this long before the window may still have payments in it (clock skew). */
const STRIPE_LIST_MARGIN_MS = 5 * 60_000;

/** The orders' side, as read before Stripe is listed. */
interface OrderRow {
  order_id: string;
  run_id: string;
  amount_cents: number;
  currency: string;
  status: string;
  payment_intent: string | null;
  refund_id: string | null;
}

/**
 * The reconciliation workflow. `providers` is needed where it runs (the workers carry it with
 * the schedule).
 */
export function reconcileWorkflow(providers?: Providers, timings: Timings = timingsFromEnv()) {
  const reconcile = newAction(
    'reconcile-payments',
    async (ctx, input: ReconcileInput): Promise<ReconcileReport> => {
      if (!providers) throw new NonRetryableError('this process has no providers configured');
      const fireAt = new Date(input.fireAt);
      const lookback = fireAt.getTime() - timings.reconcileLookbackMs;
      const accountSince = providers.stripeAccountSince?.getTime() ?? 0;
      const since = new Date(Math.max(lookback, accountSince));

      // 1. The orders, before Stripe: what they recorded is at Stripe by the time it is listed.
      const before = await ordersOf(
        ctx.client,
        'SELECT * FROM checkout.orders WHERE created_at >= $1 AND payment_intent IS NOT NULL',
        [since],
      );
      // 2. Stripe's payments and refunds since then (our orders carry metadata.order_id).
      const createdGte = Math.floor((since.getTime() - STRIPE_LIST_MARGIN_MS) / 1000);
      const charges: Stripe.PaymentIntent[] = [];
      for await (const pi of providers.stripe.paymentIntents.list({
        created: { gte: createdGte },
        limit: 100,
      })) {
        if (pi.status === 'succeeded' && pi.metadata?.order_id) charges.push(pi);
      }
      const refundsByPi = new Map<string, Stripe.Refund[]>();
      for await (const r of providers.stripe.refunds.list({
        created: { gte: createdGte },
        limit: 100,
      })) {
        const pi = typeof r.payment_intent === 'string' ? r.payment_intent : r.payment_intent?.id;
        if (!pi || r.status === 'failed' || r.status === 'canceled') continue;
        refundsByPi.set(pi, [...(refundsByPi.get(pi) ?? []), r]);
      }
      // 3. The orders of those payments, read again: a step may have committed meanwhile.
      const after = await ordersOf(
        ctx.client,
        'SELECT * FROM checkout.orders WHERE order_id = ANY($1::text[])',
        [[...new Set(charges.map((pi) => pi.metadata.order_id as string))]],
      );

      const found: Discrepancy[] = [];
      let matched = 0;
      let pending = 0;
      const runState = memo((runId: string) => runStateOf(ctx.client, runId));
      const stripeIds = new Set(charges.map((pi) => pi.id));

      // Stripe → orders.
      for (const pi of charges) {
        const orderId = pi.metadata.order_id as string;
        const o = after.get(orderId);
        const refunds = refundsByPi.get(pi.id) ?? [];
        const problem = (kind: Discrepancy['kind'], detail: string) =>
          found.push({ kind, orderId, paymentIntent: pi.id, detail });
        if (!o) {
          problem('charge_for_unknown_order', `${pi.amount} ${pi.currency} for no order`);
          continue;
        }
        if (o.payment_intent !== pi.id) {
          if (o.payment_intent !== null) {
            problem('second_charge', `the order recorded ${o.payment_intent}`);
          } else if ((await runState(o.run_id)) === 'running') {
            pending++;
          } else {
            problem('charge_not_recorded', `the order's run is ${await runState(o.run_id)}`);
          }
          continue;
        }
        if (pi.amount !== o.amount_cents || pi.currency !== o.currency) {
          problem(
            'amount_mismatch',
            `Stripe ${pi.amount} ${pi.currency}, order ${o.amount_cents} ${o.currency}`,
          );
          continue;
        }
        const refunded = refunds.reduce((n, r) => n + r.amount, 0);
        if (refunds.length > 1 || (refunds.length === 1 && refunded !== pi.amount)) {
          problem('partial_or_repeated_refund', `${refunds.length} refunds of ${refunded}`);
          continue;
        }
        if (refunds.length === 1 && o.status !== 'refunded') {
          if ((await runState(o.run_id)) === 'running') pending++;
          else problem('refund_not_recorded', `refund ${refunds[0]?.id}; order ${o.status}`);
          continue;
        }
        if (refunds.length === 0 && o.status === 'refunded') {
          // Refunded at Stripe and recorded after the listing (the first read had it unrefunded):
          // the listing is older than the refund. Read before the listing, it is a discrepancy.
          const earlier = before.get(orderId);
          if (earlier !== undefined && earlier.status !== 'refunded') pending++;
          else problem('order_refunded_without_refund', `the order recorded ${o.refund_id}`);
          continue;
        }
        matched++;
      }
      // Orders → Stripe.
      for (const o of before.values()) {
        const pi = o.payment_intent as string;
        if (!stripeIds.has(pi)) {
          found.push({
            kind: 'order_paid_without_charge',
            orderId: o.order_id,
            paymentIntent: pi,
            detail: `no succeeded payment ${pi} at Stripe`,
          });
        } else if (o.status === 'refunded' && !refundsByPi.has(pi)) {
          found.push({
            kind: 'order_refunded_without_refund',
            orderId: o.order_id,
            paymentIntent: pi,
            detail: `the order recorded ${o.refund_id}`,
          });
        }
      }

      const report: ReconcileReport = {
        fireAt: fireAt.toISOString(),
        since: since.toISOString(),
        charges: charges.length,
        refunds: [...refundsByPi.values()].reduce((n, rs) => n + rs.length, 0),
        orders: before.size,
        matched,
        pending,
        // The same problem may be seen from both sides: once each.
        discrepancies: unique(found),
      };
      const tx = await ctx.completionTx();
      await tx.query(
        `INSERT INTO checkout.reconciliations (run_id, fire_at, since, charges, refunds, orders,
           matched, pending, discrepancies)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
        [
          ctx.runId,
          fireAt,
          since,
          report.charges,
          report.refunds,
          report.orders,
          report.matched,
          report.pending,
          JSON.stringify(report.discrepancies.slice(0, 100)),
        ],
      );
      if (report.discrepancies.length > 0) {
        ctx.log.warn(
          { discrepancies: report.discrepancies.length, first: report.discrepancies[0] },
          'payment reconciliation: Stripe and the orders disagree',
        );
      }
      return report;
    },
    { timeout: 60_000 },
  );

  return newWorkflow('reconcile-payments', {
    input: ReconcileInput,
    nodes: { reconcile: { action: reconcile } },
  });
}

export type ReconcileWorkflow = ReturnType<typeof reconcileWorkflow>;

/**
 * The schedule the workers carry: `timings.reconcileCron` in UTC. After downtime the latest
 * missed fire time runs (its window covers the others'); runs may overlap (they only read).
 */
export function reconcileSchedule(workflow: ReconcileWorkflow, timings: Timings) {
  return newSchedule('reconcile-payments', {
    cron: timings.reconcileCron,
    workflow,
    input: (fireAt) => ({ fireAt: fireAt.toISOString() }),
    catchUp: 'latest',
  });
}

async function ordersOf(
  client: Client,
  text: string,
  values: unknown[],
): Promise<Map<string, OrderRow>> {
  const { rows } = await client.pool.query<OrderRow>(text, values);
  return new Map(rows.map((r) => [r.order_id, r]));
}

/** The state of the order's run (running, completed, failed, cancelled), or `deleted`. */
async function runStateOf(client: Client, runId: string): Promise<string> {
  try {
    return (await client.getRun(runId)).state;
  } catch (err) {
    if (err instanceof RunNotFoundError) return 'deleted'; // removed by retention
    throw err;
  }
}

function memo<T>(f: (k: string) => Promise<T>): (k: string) => Promise<T> {
  const seen = new Map<string, Promise<T>>();
  return (k) => {
    let v = seen.get(k);
    if (!v) {
      v = f(k);
      seen.set(k, v);
    }
    return v;
  };
}

function unique(ds: Discrepancy[]): Discrepancy[] {
  const seen = new Set<string>();
  return ds.filter((d) => {
    const k = `${d.kind}:${d.orderId}:${d.paymentIntent}`;
    if (seen.has(k)) return false;
    seen.add(k);
    return true;
  });
}
