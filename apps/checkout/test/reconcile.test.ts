/**
 * The payment reconciliation (reconcile.ts) on a real database and the Stripe fake: nothing to
 * report when Stripe and the orders agree (a shipped, an approved and a refunded order), work in
 * flight counted as pending, and each kind of disagreement found once planted.
 */
import { Client, Worker } from '@cyclone/core';
import { waitFor } from '@cyclone/testkit';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApi, type OrderView } from '../src/api.js';
import { type Fakes, startFakes } from '../src/fakes.js';
import { type Providers, providersFromEnv } from '../src/providers.js';
import {
  type ReconcileReport,
  type ReconcileWorkflow,
  reconcileWorkflow,
} from '../src/reconcile.js';
import { checkoutWorkflow, DEMO_TIMINGS, type OrderInput, type Timings } from '../src/workflow.js';
import { createTestDb, type TestDb } from './support/db.js';

const timings: Timings = { ...DEMO_TIMINGS, followUpDelayMs: 100, approvalTimeoutMs: 1_000 };

let db: TestDb;
let client: Client;
let fakes: Fakes;
let providers: Providers;
let app: FastifyInstance;
let worker: Worker;
let reconcile: ReconcileWorkflow;

beforeAll(async () => {
  db = await createTestDb();
  client = new Client({ connectionString: db.url, poolSize: 6 });
  fakes = await startFakes();
  providers = providersFromEnv({ ...fakes.env });
  app = buildApi({ client, workflow: checkoutWorkflow(undefined, timings) });
  await app.ready();
  reconcile = reconcileWorkflow(providers, timings);
  worker = new Worker({
    client,
    workflows: [checkoutWorkflow(providers, timings), reconcile],
    concurrency: 4,
    pollIntervalMs: 50,
  });
  await worker.start();
});

afterAll(async () => {
  await worker?.stop({ graceMs: 2_000 });
  await app?.close();
  await fakes?.close();
  await client?.close();
  await db?.drop();
});

let n = 0;
/** Places an order through the API; `quantity` 5 of a gadget ($247.50) is held. */
async function place(quantity = 1): Promise<string> {
  const orderId = `r-${++n}`;
  const res = await app.inject({
    method: 'POST',
    url: '/orders',
    headers: { 'content-type': 'application/json' },
    payload: JSON.stringify({
      orderId,
      sku: 'gadget',
      quantity,
      email: 'ada@example.com',
      phone: '+15551234567',
    }),
  });
  expect(res.statusCode).toBe(202);
  return orderId;
}

const settled = (orderId: string) =>
  waitFor(
    `order ${orderId} settled`,
    async () => {
      const v = (
        await app.inject({ method: 'GET', url: `/orders/${orderId}` })
      ).json() as OrderView;
      return v.state !== 'running' ? v : undefined;
    },
    { timeoutMs: 20_000, intervalMs: 50 },
  );

/** Runs a reconciliation now (as its schedule would) and returns its report. */
async function reconcileNow(): Promise<ReconcileReport> {
  const { runId } = await client.submit(reconcile, { fireAt: new Date().toISOString() });
  const run = await waitFor(
    'the reconciliation',
    async () => {
      const r = await client.getRun(runId);
      return r.state !== 'running' ? r : undefined;
    },
    { intervalMs: 50 },
  );
  expect(run.state).toBe('completed');
  const { rows } = await db.pool.query(
    'SELECT charges, matched, discrepancies FROM checkout.reconciliations WHERE run_id = $1',
    [runId],
  );
  const report = run.steps[0]?.output as unknown as ReconcileReport;
  // The same report in the shop's table, written on the step's completion transaction.
  expect(rows).toEqual([
    { charges: report.charges, matched: report.matched, discrepancies: report.discrepancies },
  ]);
  return report;
}

/** A succeeded payment at the Stripe fake for `orderId`, made behind the workflow's back. */
const chargeBehindItsBack = (orderId: string, amount = 4_950) =>
  providers.stripe.paymentIntents.create({
    amount,
    currency: 'usd',
    payment_method: 'pm_card_visa',
    confirm: true,
    automatic_payment_methods: { enabled: true, allow_redirects: 'never' },
    metadata: { order_id: orderId },
  });

describe('reconcile-payments', () => {
  it('reports nothing when Stripe and the orders agree: shipped, approved and refunded orders', async () => {
    const small = await place();
    const approved = await place(5);
    const refunded = await place(5);
    const ok = await app.inject({ method: 'POST', url: `/orders/${approved}/approve` });
    expect(ok.statusCode).toBe(202);
    await Promise.all([small, approved, refunded].map(settled));
    expect((await settled(refunded)).order.status).toBe('refunded');

    const report = await reconcileNow();
    expect(report).toMatchObject({
      charges: 3,
      orders: 3,
      refunds: 1,
      matched: 3,
      pending: 0,
      discrepancies: [],
    });
    // The window starts when this Stripe account (the fake) came into use.
    expect(report.since).toBe(fakes.urls.stripeStartedAt);
  });

  it('counts a payment its running order has not recorded yet as pending, and reports it once the run is over', async () => {
    // An order whose run has not started (a delayed run), and a payment for it already at Stripe:
    // what a charge step between its call and its completion looks like.
    const orderId = `r-${++n}`;
    const input: OrderInput = {
      orderId,
      sku: 'gadget',
      quantity: 1,
      amountCents: 4_950,
      currency: 'usd',
      email: 'ada@example.com',
      phone: '+15551234567',
      paymentMethod: 'pm_card_visa',
    };
    const { runId } = await client.submit(checkoutWorkflow(undefined, timings), input, {
      delayMs: 60_000,
    });
    await db.pool.query(
      `INSERT INTO checkout.orders (order_id, run_id, submit_key, sku, quantity, amount_cents,
         currency, email, phone) VALUES ($1, $2, $1, 'gadget', 1, 4950, 'usd', 'a@b.c', '+1555')`,
      [orderId, runId],
    );
    const pi = await chargeBehindItsBack(orderId);

    const inFlight = await reconcileNow();
    expect(inFlight.pending).toBe(1);
    expect(inFlight.discrepancies).toEqual([]);

    await client.cancel(runId);
    const over = await reconcileNow();
    expect(over.pending).toBe(0);
    expect(over.discrepancies).toEqual([
      {
        kind: 'charge_not_recorded',
        orderId,
        paymentIntent: pi.id,
        detail: "the order's run is cancelled",
      },
    ]);
  });

  it('counts a refund made and recorded while Stripe was being listed as pending, not as an order refunded without a refund', async () => {
    const orderId = await place();
    const view = await settled(orderId);
    const paymentIntent = view.order.paymentIntent as string;
    // Stripe's refunds are listed, then answered 1.5 s later: the refund below is made and
    // recorded in that time, so the listing lacks it while the orders read after it have it.
    const seen = fakes.stripe.requests.length;
    fakes.stripe.inject(
      { kind: 'delay', ms: 1_500 },
      { route: 'any', method: 'GET', path: '/v1/refunds' },
    );
    const { runId } = await client.submit(reconcile, { fireAt: new Date().toISOString() });
    await waitFor('the listing of refunds', () =>
      fakes.stripe.requests
        .slice(seen)
        .some((r) => r.method === 'GET' && r.path.startsWith('/v1/refunds')),
    );
    const refund = await providers.stripe.refunds.create({ payment_intent: paymentIntent });
    await db.pool.query(
      "UPDATE checkout.orders SET status = 'refunded', refund_id = $2 WHERE order_id = $1",
      [orderId, refund.id],
    );
    const run = await client.waitForRun(runId, { timeoutMs: 20_000 });
    expect(run.state).toBe('completed');
    const report = run.steps[0]?.output as unknown as ReconcileReport;
    expect(report.discrepancies.filter((d) => d.orderId === orderId)).toEqual([]);
    expect(report.pending).toBeGreaterThanOrEqual(1);
  });

  it('finds a second charge, a charge for no order, an amount that differs, a payment and a refund missing on one side', async () => {
    const [twice, lost, changed, refundedBehind] = [
      await place(),
      await place(),
      await place(),
      await place(),
    ];
    const views = await Promise.all([twice, lost, changed, refundedBehind].map(settled));
    const second = await chargeBehindItsBack(twice);
    const stray = await chargeBehindItsBack('no-such-order');
    await db.pool.query(
      "UPDATE checkout.orders SET payment_intent = 'pi_nowhere' WHERE order_id = $1",
      [lost],
    );
    await db.pool.query(
      'UPDATE checkout.orders SET amount_cents = amount_cents + 1 WHERE order_id = $1',
      [changed],
    );
    const refund = await providers.stripe.refunds.create({
      payment_intent: views[3]?.order.paymentIntent as string,
    });

    const report = await reconcileNow();
    // (The cancelled order of the test above is still reported: not this test's.)
    const mine = [twice, lost, changed, refundedBehind, 'no-such-order'];
    const found = report.discrepancies
      .filter((d) => mine.includes(d.orderId ?? ''))
      .map((d) => [d.kind, d.orderId, d.paymentIntent]);
    expect(found.sort()).toEqual(
      [
        ['second_charge', twice, second.id],
        ['charge_for_unknown_order', 'no-such-order', stray.id],
        // The order names a payment Stripe does not have, and Stripe's is not the order's.
        ['second_charge', lost, views[1]?.order.paymentIntent],
        ['order_paid_without_charge', lost, 'pi_nowhere'],
        ['amount_mismatch', changed, views[2]?.order.paymentIntent],
        ['refund_not_recorded', refundedBehind, views[3]?.order.paymentIntent],
      ].sort(),
    );
    expect(report.discrepancies.find((d) => d.kind === 'refund_not_recorded')?.detail).toContain(
      refund.id,
    );
  });
});
