/**
 * The fake (`@cyclone/stripe/testing`) driven by the real `stripe` SDK: Stripe's idempotency
 * semantics (PROVIDERS.md § 1.2, § 5.1), error bodies the SDK maps to its classes (§ 1.4), and
 * every fault the adapter tests rely on. No database, no network: loopback only.
 */
import Stripe from 'stripe';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { decodeForm, FakeStripe, STRIPE_IDEMPOTENCY_RETENTION_MS } from '../src/testing/index.js';

let fake: FakeStripe;

beforeEach(async () => {
  fake = await FakeStripe.start();
});

afterEach(async () => {
  await fake.close();
});

/** Resolves with the rejection of `p` (fails the test when it resolves). */
async function rejection(p: Promise<unknown>): Promise<Stripe.errors.StripeError> {
  try {
    await p;
  } catch (err) {
    return err as Stripe.errors.StripeError;
  }
  throw new Error('expected a rejection');
}

const PI = { amount: 1200, currency: 'usd' } as const;

describe('requests and objects', () => {
  it('creates, retrieves and lists payment intents with the SDK', async () => {
    const stripe = fake.client({ maxNetworkRetries: 0 });
    const pi = await stripe.paymentIntents.create({
      ...PI,
      payment_method: 'pm_card_visa',
      confirm: true,
      metadata: { order: '42' },
    });
    expect(pi).toMatchObject({
      object: 'payment_intent',
      amount: 1200,
      currency: 'usd',
      status: 'succeeded',
      metadata: { order: '42' },
    });
    expect(pi.id).toMatch(/^pi_[A-Za-z0-9]{24}$/);
    expect(pi.lastResponse.requestId).toMatch(/^req_/);
    expect(fake.count('payment_intent')).toBe(1);
    expect(fake.count('charge')).toBe(1);

    const post = fake.requestsTo('POST', '/v1/payment_intents')[0];
    expect(post?.headers['content-type']).toBe('application/x-www-form-urlencoded');
    expect(post?.headers.authorization).toBe('Bearer sk_test_fake');
    expect(post?.headers['user-agent']).toMatch(/^Stripe\/v1 NodeBindings\/\d+\./);
    // Without a key from the caller the SDK makes up a one-call key (§ 1.3).
    expect(post?.idempotencyKey).toMatch(/^stripe-node-retry-/);
    expect(post?.rawBody).toContain('metadata[order]=42');
    expect(post?.params).toMatchObject({ confirm: 'true', metadata: { order: '42' } });

    const again = await stripe.paymentIntents.retrieve(pi.id);
    expect(again.id).toBe(pi.id);

    const created = pi.created;
    const list = await stripe.paymentIntents.list({ created: { gte: created }, limit: 10 });
    expect(list.object).toBe('list');
    expect(list.data.map((x) => x.id)).toEqual([pi.id]);
    expect(list.has_more).toBe(false);
    const none = await stripe.paymentIntents.list({ created: { gt: created } });
    expect(none.data).toEqual([]);
  });

  it('paginates lists newest first, and auto-pagination walks every page', async () => {
    const stripe = fake.client({ maxNetworkRetries: 0 });
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push((await stripe.paymentIntents.create(PI)).id);
    const page = await stripe.paymentIntents.list({ limit: 2 });
    expect(page.data.map((x) => x.id)).toEqual([ids[4], ids[3]]);
    expect(page.has_more).toBe(true);
    const all = await stripe.paymentIntents.list({ limit: 2 }).autoPagingToArray({ limit: 100 });
    expect(all.map((x) => x.id)).toEqual([...ids].reverse());
  });

  it('creates customers and refunds; a refund needs a succeeded charge and is bounded', async () => {
    const stripe = fake.client({ maxNetworkRetries: 0 });
    const cus = await stripe.customers.create({ email: 'a@example.com', metadata: { x: '1' } });
    expect(cus).toMatchObject({ object: 'customer', email: 'a@example.com', metadata: { x: '1' } });
    expect((await stripe.customers.list({ email: 'a@example.com' })).data).toHaveLength(1);
    expect((await stripe.customers.retrieve(cus.id)).id).toBe(cus.id);

    const pi = await stripe.paymentIntents.create({
      ...PI,
      customer: cus.id,
      payment_method: 'pm_card_visa',
      confirm: true,
    });
    const re = await stripe.refunds.create({ payment_intent: pi.id, amount: 200 });
    expect(re).toMatchObject({
      object: 'refund',
      amount: 200,
      payment_intent: pi.id,
      status: 'succeeded',
    });
    expect((await stripe.refunds.list({ payment_intent: pi.id })).data.map((r) => r.id)).toEqual([
      re.id,
    ]);
    expect((await stripe.refunds.retrieve(re.id)).id).toBe(re.id);
    const tooMuch = await rejection(stripe.refunds.create({ payment_intent: pi.id, amount: 5000 }));
    expect(tooMuch).toBeInstanceOf(Stripe.errors.StripeInvalidRequestError);
    expect(tooMuch.code).toBe('amount_too_large');

    const unpaid = await stripe.paymentIntents.create(PI);
    const notRefundable = await rejection(stripe.refunds.create({ payment_intent: unpaid.id }));
    expect(notRefundable.code).toBe('charge_not_refundable');
    expect(fake.count('refund')).toBe(1);
    expect(fake.count('customer')).toBe(1);
  });

  it('answers unknown objects, unknown parameters and unknown routes like Stripe', async () => {
    const stripe = fake.client({ maxNetworkRetries: 0 });
    const missing = await rejection(stripe.paymentIntents.retrieve('pi_nope'));
    expect(missing).toBeInstanceOf(Stripe.errors.StripeInvalidRequestError);
    expect(missing).toMatchObject({ statusCode: 404, code: 'resource_missing', param: 'id' });

    const unknown = await rejection(
      stripe.paymentIntents.create({ ...PI, bogus: 'x' } as Stripe.PaymentIntentCreateParams),
    );
    expect(unknown).toMatchObject({ statusCode: 400, code: 'parameter_unknown', param: 'bogus' });

    const route = await rejection(stripe.charges.create({ amount: 100, currency: 'usd' }));
    expect(route).toBeInstanceOf(Stripe.errors.StripeInvalidRequestError);
    expect(route.message).toMatch(/Unrecognized request URL/);

    const noAmount = await rejection(
      stripe.paymentIntents.create({ currency: 'usd' } as Stripe.PaymentIntentCreateParams),
    );
    expect(noAmount).toMatchObject({ statusCode: 400, code: 'parameter_missing', param: 'amount' });

    const badMeta = await rejection(
      stripe.paymentIntents.create({ ...PI, metadata: { ['k'.repeat(41)]: 'v' } }),
    );
    expect(badMeta.statusCode).toBe(400);
    expect(fake.count()).toBe(0);
  });

  it('rejects a request without a usable API key with 401', async () => {
    const stripe = fake.client({ maxNetworkRetries: 0 }, 'not_a_key');
    const err = await rejection(stripe.customers.create({}));
    expect(err).toBeInstanceOf(Stripe.errors.StripeAuthenticationError);
    expect(fake.count()).toBe(0);
  });
});

describe('idempotency (PROVIDERS.md § 1.2)', () => {
  it('replays the stored response for the same key and parameters, byte for byte', async () => {
    const stripe = fake.client({ maxNetworkRetries: 0 });
    const a = await stripe.paymentIntents.create(PI, { idempotencyKey: 'k1' });
    const b = await stripe.paymentIntents.create(PI, { idempotencyKey: 'k1' });
    expect(b.id).toBe(a.id);
    expect(fake.count()).toBe(1);
    expect(b.lastResponse.headers['idempotent-replayed']).toBe('true');
    expect(b.lastResponse.headers['original-request']).toBe(a.lastResponse.requestId);
    expect(b.lastResponse.idempotencyKey).toBe('k1');
    const [first, second] = fake.requestsTo('POST', '/v1/payment_intents');
    expect(first?.outcome).toBe('executed');
    expect(second?.outcome).toBe('replayed');
    expect(JSON.stringify(b)).toBe(JSON.stringify(a));
  });

  it('answers 400 idempotency_error (StripeIdempotencyError) for other parameters or another endpoint', async () => {
    const stripe = fake.client({ maxNetworkRetries: 0 });
    await stripe.paymentIntents.create(PI, { idempotencyKey: 'k2' });
    const other = await rejection(
      stripe.paymentIntents.create({ ...PI, amount: 1300 }, { idempotencyKey: 'k2' }),
    );
    expect(other).toBeInstanceOf(Stripe.errors.StripeIdempotencyError);
    expect(other.statusCode).toBe(400);
    const endpoint = await rejection(stripe.customers.create({}, { idempotencyKey: 'k2' }));
    expect(endpoint).toBeInstanceOf(Stripe.errors.StripeIdempotencyError);
    expect(fake.count()).toBe(1);
  });

  it('scopes keys by API key', async () => {
    await fake
      .client({ maxNetworkRetries: 0 }, 'sk_test_a')
      .customers.create({}, { idempotencyKey: 'k' });
    await fake
      .client({ maxNetworkRetries: 0 }, 'sk_test_b')
      .customers.create({}, { idempotencyKey: 'k' });
    expect(fake.count('customer')).toBe(2);
  });

  it('answers 409 idempotency_key_in_use while the first request is in flight (StripeAPIError)', async () => {
    const stripe = fake.client({ maxNetworkRetries: 0 });
    const hold = fake.inject({ kind: 'hold' }, { method: 'POST' });
    const first = stripe.paymentIntents.create(PI, { idempotencyKey: 'k3' });
    await hold.waitForHit();
    const err = await rejection(stripe.paymentIntents.create(PI, { idempotencyKey: 'k3' }));
    expect(err).toBeInstanceOf(Stripe.errors.StripeAPIError);
    expect(err).toMatchObject({ statusCode: 409, code: 'idempotency_key_in_use' });
    hold.release();
    const pi = await first;
    const replay = await stripe.paymentIntents.create(PI, { idempotencyKey: 'k3' });
    expect(replay.id).toBe(pi.id);
    expect(fake.count()).toBe(1);
  });

  it("the SDK's own retries ride over a 409 with the same key", async () => {
    const stripe = fake.client({ maxNetworkRetries: 2 });
    const hold = fake.inject({ kind: 'hold' }, { method: 'POST' });
    const first = stripe.paymentIntents.create(PI, { idempotencyKey: 'k4' });
    await hold.waitForHit();
    const second = stripe.paymentIntents.create(PI, { idempotencyKey: 'k4' });
    await fake.waitForRequest((r) => r.outcome === 'conflict');
    hold.release();
    const [a, b] = await Promise.all([first, second]);
    expect(b.id).toBe(a.id);
    expect(fake.count()).toBe(1);
  });

  it('stores executed 402 declines, not validation 400s, 401s or 429s', async () => {
    const stripe = fake.client({ maxNetworkRetries: 0 });
    const declined = { ...PI, payment_method: 'pm_card_chargeDeclined', confirm: true };
    const e1 = await rejection(stripe.paymentIntents.create(declined, { idempotencyKey: 'd' }));
    expect(e1).toBeInstanceOf(Stripe.errors.StripeCardError);
    expect(e1).toMatchObject({
      statusCode: 402,
      code: 'card_declined',
      decline_code: 'generic_decline',
    });
    expect((e1 as Stripe.errors.StripeCardError).payment_intent?.status).toBe(
      'requires_payment_method',
    );
    const e2 = await rejection(stripe.paymentIntents.create(declined, { idempotencyKey: 'd' }));
    expect(e2.headers?.['idempotent-replayed']).toBe('true');
    expect(e2.requestId).not.toBe(e1.requestId);

    const invalid = { currency: 'usd' } as Stripe.PaymentIntentCreateParams;
    await rejection(stripe.paymentIntents.create(invalid, { idempotencyKey: 'v' }));
    await rejection(stripe.paymentIntents.create(invalid, { idempotencyKey: 'v' }));
    const v = fake.requests.filter((r) => r.idempotencyKey === 'v').map((r) => r.outcome);
    expect(v).toEqual(['invalid', 'invalid']);

    fake.inject({ kind: 'status', status: 429 });
    const limited = await rejection(stripe.paymentIntents.create(PI, { idempotencyKey: 'r' }));
    expect(limited).toBeInstanceOf(Stripe.errors.StripeRateLimitError);
    const ok = await stripe.paymentIntents.create(PI, { idempotencyKey: 'r' });
    expect(ok.lastResponse.headers['idempotent-replayed']).toBeUndefined();
  });

  it('stores an executed 500 and replays it; Stripe-Should-Retry steers the SDK', async () => {
    const stripe = fake.client({ maxNetworkRetries: 2 });
    fake.inject({
      kind: 'status',
      status: 500,
      headers: { 'stripe-should-retry': 'false' },
      commit: true,
    });
    const e1 = await rejection(stripe.paymentIntents.create(PI, { idempotencyKey: 's' }));
    expect(e1).toBeInstanceOf(Stripe.errors.StripeAPIError);
    expect(e1.statusCode).toBe(500);
    // One attempt only (should-retry false), and the effect happened before the failure.
    expect(fake.requests).toHaveLength(1);
    expect(fake.count('payment_intent')).toBe(1);
    const e2 = await rejection(
      stripe.paymentIntents.create(PI, { idempotencyKey: 's', maxNetworkRetries: 0 }),
    );
    expect(e2.statusCode).toBe(500);
    expect(e2.headers?.['idempotent-replayed']).toBe('true');
    expect(fake.count('payment_intent')).toBe(1);
  });

  it('prunes keys after the retention: a reuse runs as a new request', async () => {
    const stripe = fake.client({ maxNetworkRetries: 0 });
    const a = await stripe.paymentIntents.create(PI, { idempotencyKey: 'old' });
    fake.advanceTime(STRIPE_IDEMPOTENCY_RETENTION_MS - 60_000);
    expect((await stripe.paymentIntents.create(PI, { idempotencyKey: 'old' })).id).toBe(a.id);
    fake.advanceTime(120_000);
    const b = await stripe.paymentIntents.create(PI, { idempotencyKey: 'old' });
    expect(b.id).not.toBe(a.id);
    expect(b.created).toBeGreaterThan(a.created + 86_000);
    expect(fake.count('payment_intent')).toBe(2);
  });
});

describe('faults (PROVIDERS.md § 5)', () => {
  it("effect then dropped connection: the SDK's closed-connection retry (even at 0 retries) gets the replay", async () => {
    const stripe = fake.client({ maxNetworkRetries: 0 });
    fake.inject({ kind: 'reset', commit: true }, { method: 'POST' });
    const pi = await stripe.paymentIntents.create(PI, { idempotencyKey: 'lost' });
    const reqs = fake.requestsTo('POST', '/v1/payment_intents');
    expect(reqs.map((r) => [r.idempotencyKey, r.outcome, r.status])).toEqual([
      ['lost', 'fault', undefined],
      ['lost', 'replayed', 200],
    ]);
    expect(fake.objects('payment_intent').map((x) => x.id)).toEqual([pi.id]);
    expect(fake.count()).toBe(1);
  });

  it('two dropped connections exhaust that retry: StripeConnectionError, still one effect', async () => {
    const stripe = fake.client({ maxNetworkRetries: 0 });
    fake.inject({ kind: 'reset', commit: true }, { method: 'POST', times: 2 });
    const err = await rejection(stripe.paymentIntents.create(PI, { idempotencyKey: 'x' }));
    expect(err).toBeInstanceOf(Stripe.errors.StripeConnectionError);
    expect(fake.count()).toBe(1);
  });

  it('delay past the client timeout: StripeConnectionError; a re-send with the key gets the replay', async () => {
    const stripe = fake.client({ maxNetworkRetries: 0, timeout: 150 });
    fake.inject({ kind: 'delay', ms: 600 }, { method: 'POST' });
    const err = await rejection(stripe.paymentIntents.create(PI, { idempotencyKey: 'slow' }));
    expect(err).toBeInstanceOf(Stripe.errors.StripeConnectionError);
    expect(err.message).toMatch(/timeout/);
    expect(fake.count()).toBe(1);
    const pi = await stripe.paymentIntents.create(PI, { idempotencyKey: 'slow' });
    expect(pi.lastResponse.headers['idempotent-replayed']).toBe('true');
    expect(fake.count()).toBe(1);
  });

  it('refused before the effect: nothing stored, nothing done; the next try executes', async () => {
    const stripe = fake.client({ maxNetworkRetries: 0 });
    fake.inject({ kind: 'reset', commit: false }, { method: 'POST', times: 2 });
    const err = await rejection(stripe.customers.create({}, { idempotencyKey: 'ref' }));
    expect(err).toBeInstanceOf(Stripe.errors.StripeConnectionError);
    expect(fake.count()).toBe(0);
    const cus = await stripe.customers.create({}, { idempotencyKey: 'ref' });
    expect(cus.lastResponse.headers['idempotent-replayed']).toBeUndefined();
    expect(fake.count()).toBe(1);
  });

  it('refuseConnections() refuses connections (ECONNREFUSED) until resume()', async () => {
    const stripe = fake.client({ maxNetworkRetries: 0 });
    await stripe.customers.create({});
    await fake.refuseConnections();
    const err = await rejection(stripe.customers.create({}));
    expect(err).toBeInstanceOf(Stripe.errors.StripeConnectionError);
    expect((err.detail as { code?: string } | undefined)?.code).toBe('ECONNREFUSED');
    await fake.resume();
    await stripe.customers.create({});
    expect(fake.count('customer')).toBe(2);
  });

  it('error statuses map to the SDK classes by status (§ 1.4)', async () => {
    const stripe = fake.client({ maxNetworkRetries: 0 });
    const cases: [number, new (...a: never[]) => Stripe.errors.StripeError][] = [
      [400, Stripe.errors.StripeInvalidRequestError],
      [401, Stripe.errors.StripeAuthenticationError],
      [402, Stripe.errors.StripeCardError],
      [403, Stripe.errors.StripePermissionError],
      [409, Stripe.errors.StripeAPIError],
      [429, Stripe.errors.StripeRateLimitError],
      [503, Stripe.errors.StripeAPIError],
    ];
    for (const [status, cls] of cases) {
      fake.inject({ kind: 'status', status });
      const err = await rejection(stripe.customers.create({}));
      expect(err, `HTTP ${status}`).toBeInstanceOf(cls);
      expect(err.statusCode).toBe(status);
    }
  });

  it('aims by method, path and idempotency key; the handle counts the hits', async () => {
    const stripe = fake.client({ maxNetworkRetries: 0 });
    const h = fake.inject(
      { kind: 'reset', commit: true },
      { method: 'POST', path: '/v1/payment_intents', idempotencyKey: 'aimed' },
    );
    // Another path with the key (under another API key: keys are scoped by it), another key.
    await fake
      .client({ maxNetworkRetries: 0 }, 'sk_test_b')
      .customers.create({}, { idempotencyKey: 'aimed' });
    await stripe.paymentIntents.create(PI, { idempotencyKey: 'other' });
    expect(h.hits).toBe(0);
    const pi = await stripe.paymentIntents.create(PI, { idempotencyKey: 'aimed' });
    expect(h.hits).toBe(1);
    const reqs = fake.requests.filter(
      (r) => r.idempotencyKey === 'aimed' && r.path !== '/v1/customers',
    );
    expect(reqs.map((r) => [r.outcome, r.fault])).toEqual([
      ['fault', 'reset'],
      ['replayed', undefined],
    ]);
    expect(fake.objects('payment_intent').map((x) => x.id)).toContain(pi.id);
  });
});

describe('form decoding', () => {
  it('decodes bracket nesting and indexed arrays', () => {
    expect(decodeForm('a=1&m[k]=v&m[n][0]=x&m[n][1]=y&l[0][p]=q&e[]=z&e[]=w&s=%5Bx%5D')).toEqual({
      a: '1',
      m: { k: 'v', n: ['x', 'y'] },
      l: [{ p: 'q' }],
      e: ['z', 'w'],
      s: '[x]',
    });
  });
});
