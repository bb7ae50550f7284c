/**
 * The order API (Fastify `inject`, a real database): idempotent submission by Idempotency-Key
 * or order id, the 4xx answers with their reasons, and GET of an order as its run progresses
 * (on an in-process worker and the provider fakes).
 */
import { Client, Worker } from '@cyclone/core';
import { waitFor } from '@cyclone/testkit';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApi, type OrderView } from '../src/api.js';
import { type Fakes, startFakes } from '../src/fakes.js';
import { providersFromEnv } from '../src/providers.js';
import { checkoutWorkflow } from '../src/workflow.js';
import { createTestDb, type TestDb } from './support/db.js';

let db: TestDb;
let client: Client;
let app: FastifyInstance;

beforeAll(async () => {
  db = await createTestDb();
  client = new Client({ connectionString: db.url, poolSize: 6 });
  app = buildApi({ client, twilioAuthToken: 'test-token' });
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
    expect(before.steps.map((s) => [s.node, s.state])).toEqual([
      ['reserve', 'available'],
      ['charge', 'pending'],
      ['receipt', 'pending'],
      ['sms', 'pending'],
      ['fulfil', 'pending'],
    ]);
    expect(await view(runId)).toEqual(before);

    // Run it: a worker in this process, the providers' fakes.
    let fakes: Fakes | undefined;
    let worker: Worker | undefined;
    try {
      fakes = await startFakes();
      worker = new Worker({
        client,
        workflows: [checkoutWorkflow(providersFromEnv({ ...fakes.env }))],
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
      expect(done.steps.every((s) => s.state === 'completed' && s.attempt === 1)).toBe(true);
      expect(done.order.status).toBe('fulfilled');
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
      expect(fakes.sendgrid.sent.filter((m) => mine(m.customArgs.order_id))).toHaveLength(1);
      expect(fakes.twilio.created.filter((m) => m.body.includes(`${body.orderId} `))).toHaveLength(
        1,
      );
    } finally {
      await worker?.stop({ graceMs: 2_000 });
      await fakes?.close();
    }
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
