/**
 * The order API (Fastify `inject`, a real database): idempotent submission by Idempotency-Key
 * or order id, the 4xx answers with their reasons, GET of an order as its run progresses, and
 * the approval of a held order (on an in-process worker and the provider fakes, with waits of
 * a fraction of a second).
 */
import { Client, Worker } from '@cyclone/core';
import { waitFor } from '@cyclone/testkit';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApi, type OrderView } from '../src/api.js';
import { type Fakes, startFakes } from '../src/fakes.js';
import { providersFromEnv } from '../src/providers.js';
import { checkoutWorkflow, DEMO_TIMINGS, type Timings } from '../src/workflow.js';
import { createTestDb, type TestDb } from './support/db.js';

let db: TestDb;
let client: Client;
let app: FastifyInstance;

/** The API's and the workers' (a timer and a timeout fixed at submit: both must agree). */
const timings: Timings = { ...DEMO_TIMINGS, followUpDelayMs: 300, approvalTimeoutMs: 1_500 };

beforeAll(async () => {
  db = await createTestDb();
  client = new Client({ connectionString: db.url, poolSize: 6 });
  app = buildApi({
    client,
    workflow: checkoutWorkflow(undefined, timings),
    twilioAuthToken: 'test-token',
  });
  await app.ready();
});

afterAll(async () => {
  await app?.close();
  await client?.close();
  await db?.drop();
});

let n = 0;
const order = (over: Record<string, unknown> = {}) => ({
  orderId: `o-${++n}`,
  sku: 'widget',
  quantity: 2,
  email: 'ada@example.com',
  phone: '+15551234567',
  ...over,
});

const post = (body: unknown, key?: string) =>
  app.inject({
    method: 'POST',
    url: '/orders',
    headers: { 'content-type': 'application/json', ...(key ? { 'idempotency-key': key } : {}) },
    payload: typeof body === 'string' ? body : JSON.stringify(body),
  });

const runsOf = async (orderId: string) =>
  (
    await db.pool.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM cyclone.cyclone_runs WHERE input->>'orderId' = $1",
      [orderId],
    )
  ).rows[0]?.n;

describe('POST /orders', () => {
  it('accepts an order with 202 and the run id, and writes the order with its run', async () => {
    const body = order();
    const res = await post(body, 'key-accept');
    expect(res.statusCode).toBe(202);
    const json = res.json();
    expect(json).toMatchObject({ orderId: body.orderId, created: true });
    expect(json.runId).toMatch(/^[0-9a-f-]{36}$/);
    expect(res.headers.location).toBe(`/orders/${body.orderId}`);
    expect(res.headers['idempotent-replayed']).toBeUndefined();
    const { rows } = await db.pool.query(
      'SELECT run_id, amount_cents, currency, status FROM checkout.orders WHERE order_id = $1',
      [body.orderId],
    );
    // The amount comes from the catalog, never from the client.
    expect(rows).toEqual([
      { run_id: json.runId, amount_cents: 2 * 1999, currency: 'usd', status: 'accepted' },
    ]);
  });

  it('answers a retried request (same Idempotency-Key, same body) with the same run', async () => {
    const body = order();
    const first = await post(body, 'key-retry');
    const again = await post(body, 'key-retry');
    expect(again.statusCode).toBe(202);
    expect(again.json()).toMatchObject({ runId: first.json().runId, created: false });
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(await runsOf(body.orderId)).toBe(1);
  });

  it('gives concurrent duplicates one run', async () => {
    const body = order();
    const answers = await Promise.all(Array.from({ length: 6 }, () => post(body, 'key-burst')));
    expect(answers.map((a) => a.statusCode)).toEqual(Array(6).fill(202));
    expect(new Set(answers.map((a) => a.json().runId)).size).toBe(1);
    expect(answers.filter((a) => a.json().created)).toHaveLength(1);
    expect(await runsOf(body.orderId)).toBe(1);
  });

  it('refuses the same Idempotency-Key with another body: 422, naming the key and the run', async () => {
    const first = await post(order(), 'key-reused');
    const other = order();
    const res = await post(other, 'key-reused');
    expect(res.statusCode).toBe(422);
    expect(res.json()).toMatchObject({
      error: 'idempotency_key_reused',
      runId: first.json().runId,
    });
    expect(res.json().message).toContain('"key-reused" was already used for a different order');
    expect(await runsOf(other.orderId)).toBe(0);
  });

  it('keys a request without Idempotency-Key by its order id', async () => {
    const body = order();
    const a = await post(body);
    const b = await post(body);
    expect([a.statusCode, b.statusCode]).toEqual([202, 202]);
    expect(b.json()).toMatchObject({ runId: a.json().runId, created: false });
    const changed = await post({ ...body, quantity: 3 });
    expect(changed.statusCode).toBe(422);
    expect(changed.json().message).toContain(
      `order ${body.orderId} was already submitted with different contents`,
    );
    expect(await runsOf(body.orderId)).toBe(1);
  });

  it('refuses an order id that already has a run under another key: 409', async () => {
    const body = order();
    const first = await post(body, 'key-one');
    const res = await post(body, 'key-two');
    expect(res.statusCode).toBe(409);
    expect(res.json()).toMatchObject({ error: 'order_exists', runId: first.json().runId });
    // Nothing of the refused submission was kept: the run and the order go together.
    expect(await runsOf(body.orderId)).toBe(1);
  });

  it('answers bad input with 400 and the issues', async () => {
    const res = await post({
      orderId: 'has spaces',
      sku: 'spaceship',
      quantity: 0,
      email: 'not-an-email',
      phone: '555',
      colour: 'red',
    });
    expect(res.statusCode).toBe(400);
    const json = res.json();
    expect(json.error).toBe('invalid_order');
    const paths = json.issues.map((i: { path: string }) => i.path).sort();
    expect(paths).toEqual(['', 'email', 'orderId', 'phone', 'quantity', 'sku']);
    expect(json.issues.find((i: { path: string }) => i.path === '').message).toContain('colour');
    expect(
      (await db.pool.query("SELECT 1 FROM checkout.orders WHERE order_id = 'has spaces'")).rowCount,
    ).toBe(0);

    const missing = await post({});
    expect(missing.statusCode).toBe(400);
    expect(
      missing
        .json()
        .issues.map((i: { path: string }) => i.path)
        .sort(),
    ).toEqual(['email', 'orderId', 'phone', 'quantity', 'sku']);

    const malformed = await post('{"orderId": ');
    expect(malformed.statusCode).toBe(400);
    expect(malformed.json().error).toBe('bad_request');

    const badKey = await post(order(), 'k'.repeat(256));
    expect(badKey.statusCode).toBe(400);
    expect(badKey.json().error).toBe('invalid_idempotency_key');
  });
});

describe('GET /orders/:id', () => {
  it('answers 404 for an unknown order id or run id', async () => {
    for (const id of ['no-such-order', '00000000-0000-4000-8000-000000000000']) {
      const res = await app.inject({ method: 'GET', url: `/orders/${id}` });
      expect(res.statusCode).toBe(404);
      expect(res.json()).toMatchObject({ error: 'not_found' });
      expect(res.json().message).toContain(id);
    }
  });

  it('shows the run and each node’s state, by order id or run id, until fulfilled', async () => {
    const body = order({ sku: 'gizmo', quantity: 1 });
    const { runId } = (await post(body, 'key-get')).json();
    const view = async (id: string) =>
      (await app.inject({ method: 'GET', url: `/orders/${id}` })).json() as OrderView;

    const before = await view(body.orderId);
    expect(before).toMatchObject({ orderId: body.orderId, runId, state: 'running' });
    expect(before.order).toMatchObject({ status: 'accepted', amountCents: 899, sku: 'gizmo' });
    expect(before.approval).toBeNull(); // $8.99: never held
    expect(before.steps.map((s) => [s.node, s.state])).toEqual([
      ['reserve', 'available'],
      ['charge', 'pending'],
      ['approval', 'pending'],
      ['receipt', 'pending'],
      ['sms', 'pending'],
      ['refund', 'pending'],
      ['fulfil', 'pending'],
      ['followUp', 'pending'],
    ]);
    expect(await view(runId)).toEqual(before);

    // Run it: a worker in this process, the providers' fakes.
    let fakes: Fakes | undefined;
    let worker: Worker | undefined;
    try {
      fakes = await startFakes();
      worker = new Worker({
        client,
        workflows: [checkoutWorkflow(providersFromEnv({ ...fakes.env }), timings)],
        concurrency: 4,
        pollIntervalMs: 50,
      });
      await worker.start();
      const done = await waitFor(
        'the order fulfilled',
        async () => {
          const v = await view(body.orderId);
          return v.state !== 'running' ? v : undefined;
        },
        { timeoutMs: 20_000, intervalMs: 100 },
      );
      expect(done.state).toBe('completed');
      // A small order skips its approval, so the refund too; the rest ran once each.
      expect(done.steps.map((s) => [s.node, s.state, s.attempt])).toEqual([
        ['reserve', 'completed', 1],
        ['charge', 'completed', 1],
        ['approval', 'skipped', 1],
        ['receipt', 'completed', 1],
        ['sms', 'completed', 1],
        ['refund', 'skipped', 1],
        ['fulfil', 'completed', 1],
        ['followUp', 'completed', 1],
      ]);
      expect(done.order.status).toBe('fulfilled');
      // The follow-up e-mail's timer ran from the shipment, by the database's clock.
      const fulfil = done.steps.find((s) => s.node === 'fulfil');
      expect(Date.parse(done.order.followedUpAt ?? '')).toBeGreaterThanOrEqual(
        Date.parse(fulfil?.completedAt ?? '') + timings.followUpDelayMs,
      );
      expect(done.order.paymentIntent).toMatch(/^pi_/);
      expect(done.order.receiptMessageId).toBeTruthy();
      expect(done.order.smsSid).toMatch(/^SM/);
      // (The worker also ran the orders of the tests above: count this order's effects.)
      const mine = (id: unknown) => id === body.orderId;
      const charged = fakes.stripe
        .objects('payment_intent')
        .filter((pi) => mine((pi.metadata as Record<string, string>).order_id));
      expect(charged.map((pi) => [pi.id, pi.status, pi.amount])).toEqual([
        [done.order.paymentIntent, 'succeeded', 899],
      ]);
      // The receipt, then the follow-up (its own key: scope follow-up).
      expect(
        fakes.sendgrid.sent
          .filter((m) => mine(m.customArgs.order_id))
          .map((m) => [m.customArgs.kind ?? 'receipt', m.subject]),
      ).toEqual([
        ['receipt', `Your receipt for order ${body.orderId}`],
        ['follow_up', `How is your order ${body.orderId}?`],
      ]);
      expect(done.order.followUpMessageId).toBeTruthy();
      expect(fakes.twilio.created.filter((m) => m.body.includes(`${body.orderId} `))).toHaveLength(
        1,
      );
    } finally {
      await worker?.stop({ graceMs: 2_000 });
      await fakes?.close();
    }
  });
});

describe('POST /orders/:id/approve', () => {
  let fakes: Fakes;
  let worker: Worker;

  beforeAll(async () => {
    fakes = await startFakes();
    worker = new Worker({
      client,
      workflows: [checkoutWorkflow(providersFromEnv({ ...fakes.env }), timings)],
      concurrency: 4,
      pollIntervalMs: 50,
    });
    await worker.start();
  });

  afterAll(async () => {
    await worker?.stop({ graceMs: 2_000 });
    await fakes?.close();
  });

  /** 5 gadgets: $247.50, over the $100 threshold. */
  const large = () => order({ sku: 'gadget', quantity: 5 });
  const approve = (id: string, body?: unknown) =>
    app.inject({
      method: 'POST',
      url: `/orders/${id}/approve`,
      ...(body === undefined
        ? {}
        : { headers: { 'content-type': 'application/json' }, payload: JSON.stringify(body) }),
    });
  const view = async (id: string) =>
    (await app.inject({ method: 'GET', url: `/orders/${id}` })).json() as OrderView;
  const settled = (id: string) =>
    waitFor(
      `order ${id} settled`,
      async () => {
        const v = await view(id);
        return v.state !== 'running' ? v : undefined;
      },
      { timeoutMs: 20_000, intervalMs: 50 },
    );
  const states = (v: OrderView) => Object.fromEntries(v.steps.map((s) => [s.node, s.state]));
  const signals = async (runId: string) =>
    (
      await db.pool.query<{ n: number }>(
        'SELECT count(*)::int AS n FROM cyclone.cyclone_signals WHERE run_id = $1',
        [runId],
      )
    ).rows[0]?.n;

  it('answers 404 for an unknown order id or run id', async () => {
    for (const id of ['no-such-order', '00000000-0000-4000-8000-000000000000']) {
      const res = await approve(id);
      expect(res.statusCode).toBe(404);
      expect(res.json()).toMatchObject({ error: 'not_found' });
    }
  });

  it('refuses to approve an order that is not held (up to $100): 409, nothing sent', async () => {
    const body = order({ sku: 'gadget', quantity: 2 }); // $99.00
    const { runId } = (await post(body)).json();
    const res = await approve(body.orderId, { by: 'alice' });
    expect(res.statusCode).toBe(409);
    expect(res.json()).toMatchObject({ error: 'approval_not_required', runId });
    expect(res.json().message).toContain('$99.00');
    expect(await signals(runId)).toBe(0);
    const done = await settled(body.orderId);
    expect(done.approval).toBeNull();
    expect(states(done)).toMatchObject({ approval: 'skipped', fulfil: 'completed' });
  });

  it('refuses a malformed approval: 400 with the issues', async () => {
    const body = large();
    const { runId } = (await post(body)).json();
    for (const bad of [{ by: '' }, { who: 'alice' }]) {
      const res = await approve(body.orderId, bad);
      expect(res.statusCode).toBe(400);
      expect(res.json().error).toBe('invalid_approval');
    }
    expect(await signals(runId)).toBe(0);
  });

  it('approves a held order while it waits: 202 once, then a replay; it ships, nothing refunded', async () => {
    const body = large();
    const { runId } = (await post(body)).json();
    const waiting = await waitFor(
      'the order waiting for its approval',
      async () => {
        const v = await view(body.orderId);
        return v.approval?.state === 'waiting' ? v : undefined;
      },
      { timeoutMs: 10_000, intervalMs: 20 },
    );
    expect(Date.parse(waiting.approval?.deadline ?? '')).toBeGreaterThan(Date.now() - 1_000);
    // Charged: it waits from then on, parked (scheduled) or about to be.
    expect(states(waiting)).toMatchObject({ charge: 'completed', fulfil: 'pending' });
    expect(['available', 'running', 'scheduled']).toContain(states(waiting).approval);

    const first = await approve(runId, { by: 'alice' }); // by run id, too
    expect(first.statusCode).toBe(202);
    expect(first.json()).toEqual({
      orderId: body.orderId,
      runId,
      accepted: true,
      links: { self: `/orders/${body.orderId}` },
    });
    expect(first.headers.location).toBe(`/orders/${body.orderId}`);
    expect(first.headers['idempotent-replayed']).toBeUndefined();
    const again = await approve(body.orderId, { by: 'bob' });
    expect(again.statusCode).toBe(202);
    expect(again.json()).toMatchObject({ accepted: false });
    expect(again.headers['idempotent-replayed']).toBe('true');

    const done = await settled(body.orderId);
    expect(done.state).toBe('completed');
    // The first approval stands.
    expect(done.approval).toEqual({ state: 'approved', deadline: null, by: 'alice' });
    expect(states(done)).toMatchObject({
      approval: 'completed',
      refund: 'skipped',
      fulfil: 'completed',
      followUp: 'completed',
    });
    expect(done.order).toMatchObject({ status: 'fulfilled', refundId: null });
    const pi = done.order.paymentIntent;
    expect(fakes.stripe.objects('refund').filter((r) => r.payment_intent === pi)).toEqual([]);
    expect(
      fakes.shipping.effects.filter(
        (e) => (e.body as { order_id?: string }).order_id === body.orderId,
      ),
    ).toHaveLength(1);

    // Settled: nothing left to approve.
    const late = await approve(body.orderId);
    expect(late.statusCode).toBe(409);
    expect(late.json()).toMatchObject({ error: 'order_finished', runId });
  });

  it('takes an approval sent before the order waits (stored, delivered when it is reached)', async () => {
    const body = large();
    const res = await post(body);
    const early = await approve(body.orderId); // no body: by nobody in particular
    expect(early.statusCode).toBe(202);
    expect(early.json()).toMatchObject({ accepted: true, runId: res.json().runId });
    const done = await settled(body.orderId);
    expect(done.approval).toEqual({ state: 'approved', deadline: null, by: null });
    expect(states(done)).toMatchObject({ fulfil: 'completed', refund: 'skipped' });
  });

  it('refunds a held order nobody approved in time, ships nothing, and refuses a late approval: 409', async () => {
    const body = large();
    const { runId } = (await post(body)).json();
    const done = await settled(body.orderId);
    expect(done.state).toBe('completed');
    expect(done.approval).toEqual({ state: 'timed_out', deadline: null, by: null });
    expect(states(done)).toMatchObject({
      approval: 'completed',
      refund: 'completed',
      fulfil: 'skipped',
      followUp: 'skipped',
    });
    expect(done.order).toMatchObject({ status: 'refunded', fulfilledAt: null });
    expect(done.order.refundId).toMatch(/^re_/);
    const refunds = fakes.stripe
      .objects('refund')
      .filter((r) => r.payment_intent === done.order.paymentIntent);
    expect(refunds.map((r) => [r.id, r.amount])).toEqual([[done.order.refundId, 5 * 4_950]]);
    expect(
      fakes.shipping.effects.filter(
        (e) => (e.body as { order_id?: string }).order_id === body.orderId,
      ),
    ).toEqual([]);

    const late = await approve(body.orderId, { by: 'alice' });
    expect(late.statusCode).toBe(409);
    expect(late.json()).toMatchObject({ error: 'approval_timed_out', runId });
    expect(await signals(runId)).toBe(0);
  });
});

describe('webhooks', () => {
  it('refuses a Twilio status callback without a valid signature', async () => {
    const res = await app.inject({
      method: 'POST',
      url: '/hooks/twilio/status?ck=x',
      headers: { 'content-type': 'application/x-www-form-urlencoded', 'x-twilio-signature': 'no' },
      payload: 'MessageSid=SM1&MessageStatus=sent',
    });
    expect(res.statusCode).toBe(403);
  });

  it('records SendGrid events (unsigned when no verification key is configured)', async () => {
    const res = await app.inject({
      method: 'POST',
      url: '/hooks/sendgrid',
      headers: { 'content-type': 'application/json' },
      payload: JSON.stringify([{ event: 'processed', sg_event_id: 'e1', email: 'a@example.com' }]),
    });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toEqual({ recorded: 0, ignored: 1 });
  });
});
