/**
 * The adapter beyond the seven must-haves (issue 4): several mutating calls in one handler,
 * reconciliation past Stripe's 24 h key window, the caller's own request options, untouched
 * reads, `rawRequest`, and the classification of the SDK's real errors. Real Workers, real
 * PostgreSQL, the real `stripe` SDK against the fake.
 */
import { type Context, newAction, Worker } from '@cyclone/core';
import { getLedgerEntry } from '@cyclone/idempotency';
import { waitFor } from '@cyclone/testkit';
import Stripe from 'stripe';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { classifyStripeError, idempotentStripe } from '../src/index.js';
import type { FakeStripe } from '../src/testing/index.js';
import {
  actionName,
  type FileHarness,
  fileHarness,
  postKeys,
  runOnce,
  singleNode,
  startFake,
} from './support/harness.js';

let h: FileHarness;
let fake: FakeStripe;

beforeAll(async () => {
  h = await fileHarness();
});
afterAll(async () => {
  await h?.close();
});
beforeEach(async () => {
  fake = await startFake();
});
afterEach(async () => {
  await fake.close();
});

const CHARGE = { amount: 4200, currency: 'usd', payment_method: 'pm_card_visa', confirm: true };

describe('keys of several calls', () => {
  it('two mutating calls get two keys, each stable across attempts', async () => {
    // Fault: the second call's response is lost twice in attempt 1 (ambiguous); attempt 2 gets
    // the first call from the ledger (no HTTP) and re-sends the second under the same key.
    fake.inject({ kind: 'reset', commit: true }, { route: 'payment_intents.create', times: 2 });
    const stripe = fake.client({ maxNetworkRetries: 0 });
    const wf = singleNode(
      newAction(
        actionName('two_calls'),
        async (ctx: Context) => {
          const s = idempotentStripe(stripe, ctx);
          const customer = await s.customers.create({ email: 'buyer@example.com' });
          const pi = await s.paymentIntents.create({ ...CHARGE, customer: customer.id });
          return { customer: customer.id, paymentIntent: pi.id };
        },
        { maxAttempts: 5, backoff: () => 50 },
      ),
    );
    const { run, step, ledger, runId } = await runOnce(h, wf, {});
    expect(run.state, JSON.stringify(step.errors)).toBe('completed');
    expect(step.attempt).toBe(2);
    expect(postKeys(fake, '/v1/customers')).toEqual([`${runId}:charge`]);
    expect(postKeys(fake, '/v1/payment_intents')).toEqual([
      `${runId}:charge:call2`,
      `${runId}:charge:call2`,
      `${runId}:charge:call2`,
    ]);
    expect(ledger.map((e) => [e.key, e.phase, e.operation])).toEqual([
      [`${runId}:charge`, 'succeeded', 'POST /v1/customers'],
      [`${runId}:charge:call2`, 'succeeded', 'POST /v1/payment_intents'],
    ]);
    expect(fake.count('customer')).toBe(1);
    expect(fake.count('charge')).toBe(1);
    expect(fake.objects('customer')[0]?.metadata).toMatchObject({ cyclone_key: `${runId}:charge` });
  });

  it("a wrapper scope and the caller's own idempotencyKey name the keys; other request options are kept", async () => {
    const stripe = fake.client({ maxNetworkRetries: 0 });
    const wf = singleNode(
      newAction(actionName('options'), async (ctx: Context) => {
        const refunds = idempotentStripe(stripe, ctx, { scope: 'refund' });
        const plain = idempotentStripe(stripe, ctx);
        const pi = await plain.paymentIntents.create(CHARGE, { stripeAccount: 'acct_123' });
        await refunds.refunds.create({ payment_intent: pi.id, amount: 100 });
        await refunds.refunds.create({ payment_intent: pi.id, amount: 200 });
        await plain.customers.create(
          { name: 'x' },
          { idempotencyKey: 'caller-key-1', timeout: 5000 },
        );
        // Reads go to Stripe untouched: no key of ours, no ledger row.
        await plain.paymentIntents.retrieve(pi.id);
        await plain.paymentIntents.list({ limit: 3 });
        return pi.id;
      }),
    );
    const { run, ledger, runId } = await runOnce(h, wf, {});
    expect(run.state).toBe('completed');
    const posts = fake.requests.filter((r) => r.method === 'POST');
    expect(posts.map((r) => r.idempotencyKey)).toEqual([
      `${runId}:charge`,
      `${runId}:charge:refund`,
      `${runId}:charge:refund:call2`,
      'caller-key-1',
    ]);
    expect(posts[0]?.headers['stripe-account']).toBe('acct_123');
    expect(posts[3]?.params.metadata).toMatchObject({ cyclone_key: 'caller-key-1' });
    const gets = fake.requests.filter((r) => r.method === 'GET');
    expect(gets).toHaveLength(2);
    expect(ledger.map((e) => e.key)).toEqual([
      `${runId}:charge`,
      `${runId}:charge:key:caller-key-1`,
      `${runId}:charge:refund`,
      `${runId}:charge:refund:call2`,
    ]);
  });

  it('nested resources (stripe.billing.meters) are wrapped too', async () => {
    const stripe = fake.client({ maxNetworkRetries: 0 });
    const wf = singleNode(
      newAction(actionName('nested'), async (ctx: Context) => {
        const s = idempotentStripe(stripe, ctx);
        // The fake does not serve meters: a 404, a definitive failure, recorded.
        const err = await s.billing.meters
          .create({
            display_name: 'Calls',
            event_name: 'api_call',
            default_aggregation: { formula: 'sum' },
          })
          .then(
            () => undefined,
            (e: unknown) => e as Error,
          );
        return err?.name ?? 'none';
      }),
    );
    const { run, step, ledger, runId } = await runOnce(h, wf, {});
    expect(run.state).toBe('completed');
    expect(step.output).toBe('DefinitiveFailureError');
    expect(fake.requests.map((r) => [r.method, r.path, r.idempotencyKey])).toEqual([
      ['POST', '/v1/billing/meters', `${runId}:charge`],
    ]);
    expect(ledger[0]).toMatchObject({ phase: 'failed', operation: 'POST /v1/billing/meters' });
  });

  it('rawRequest POSTs are keyed and guarded too', async () => {
    const stripe = fake.client({ maxNetworkRetries: 0 });
    const seen: string[] = [];
    const wf = singleNode(
      newAction(
        actionName('raw'),
        async (ctx: Context) => {
          const s = idempotentStripe(stripe, ctx);
          const c = (await s.rawRequest('POST', '/v1/customers', { email: 'r@example.com' })) as {
            id: string;
          };
          seen.push(c.id);
          if (ctx.attempt === 1) throw new Error('crash after the call');
          return c.id;
        },
        { backoff: () => 50 },
      ),
    );
    const { run, runId } = await runOnce(h, wf, {});
    expect(run.state).toBe('completed');
    expect(postKeys(fake)).toEqual([`${runId}:charge`]);
    expect(seen[1]).toBe(seen[0]);
    expect(fake.count('customer')).toBe(1);
  });
});

describe("past Stripe's 24 h window (PROVIDERS.md § 1.6)", () => {
  /**
   * Runs a charge whose attempt 1 ends with an unknown outcome, then — before attempt 2 — ages
   * the ledger's call by 25 h and makes the fake forget its keys (as Stripe may after 24 h).
   */
  async function agedRun(fault: 'lost response' | 'refused', charge: typeof CHARGE = CHARGE) {
    fake.inject({ kind: 'reset', commit: fault === 'lost response' }, { method: 'POST', times: 2 });
    const stripe = fake.client({ maxNetworkRetries: 0 });
    const action = newAction(
      actionName('aged'),
      async (ctx: Context) => {
        const pi = await idempotentStripe(stripe, ctx).paymentIntents.create(charge);
        return pi.id;
      },
      { maxAttempts: 4, backoff: () => 2000 },
    );
    const wf = singleNode(action);
    const since = new Date(Date.now() - 1000);
    const done = runOnce(h, wf, {}, { timeoutMs: 20_000 });
    // Wait for attempt 1's unknown outcome.
    const row = await waitFor('an unknown outcome in the ledger', async () => {
      const { rows } = await h.db.pool.query<{ run_id: string; key: string }>(
        `SELECT run_id, key FROM cyclone.cyclone_idempotency WHERE phase = 'unknown' AND created_at >= $1`,
        [since],
      );
      return rows[0];
    });
    await h.db.pool.query(
      `UPDATE cyclone.cyclone_idempotency SET call_started_at = call_started_at - interval '25 hours' WHERE run_id = $1`,
      [row.run_id],
    );
    fake.advanceTime(25 * 3600 * 1000);
    fake.pruneIdempotencyKeys();
    return { result: await done, key: row.key };
  }

  it('finds the lost object by its metadata marker with a list call, and does not re-send', async () => {
    // Fault: effect committed, response lost twice; 25 h pass; Stripe forgot the key.
    const { result, key } = await agedRun('lost response');
    expect(result.run.state, JSON.stringify(result.step.errors)).toBe('completed');
    expect(postKeys(fake)).toEqual([key, key]);
    const list = fake.requestsTo('GET', '/v1/payment_intents');
    expect(list).toHaveLength(1);
    expect(list[0]?.params).toMatchObject({ limit: '100', created: { gte: expect.any(String) } });
    expect(fake.count('charge')).toBe(1);
    expect(result.step.output).toBe(fake.objects('payment_intent')[0]?.id);
    const entry = await getLedgerEntry(h.client, key);
    expect(entry?.phase).toBe('succeeded');
  });

  it('a declined card whose answer was lost: the list finds the declined intent, and the step fails as a decline, recorded failed', async () => {
    // Fault: Stripe declined the card (the intent exists, with last_payment_error) and the 402
    // was lost twice; 25 h pass; Stripe forgot the key.
    const { result, key } = await agedRun('lost response', {
      ...CHARGE,
      payment_method: 'pm_card_chargeDeclined',
    });
    expect(fake.objects('payment_intent')[0]).toMatchObject({ status: 'requires_payment_method' });
    expect(result.run.state, JSON.stringify(result.step.errors)).toBe('failed');
    expect(result.step.errors.at(-1)?.message).toMatch(/card_declined/);
    expect(fake.requestsTo('GET', '/v1/payment_intents')).toHaveLength(1);
    expect(postKeys(fake)).toEqual([key, key]);
    expect(fake.count('charge')).toBe(0);
    const entry = await getLedgerEntry(h.client, key);
    expect(entry).toMatchObject({ phase: 'failed', error: { code: 'card_declined' } });
  });

  it('re-sends once when the list proves the object absent', async () => {
    // Fault: the request is refused before any effect (twice); 25 h pass.
    const { result, key } = await agedRun('refused');
    expect(result.run.state, JSON.stringify(result.step.errors)).toBe('completed');
    expect(fake.requestsTo('GET', '/v1/payment_intents')).toHaveLength(1);
    expect(postKeys(fake)).toEqual([key, key, key]);
    expect(fake.count('charge')).toBe(1);
  });
});

describe('a 5xx that Stripe stored under the key (PROVIDERS.md § 4.2, 4)', () => {
  async function run500(commit: boolean) {
    fake.inject({ kind: 'status', status: 500, commit }, { method: 'POST' });
    const stripe = fake.client({ maxNetworkRetries: 0 });
    const wf = singleNode(
      newAction(
        actionName('five_hundred'),
        async (ctx: Context) =>
          (await idempotentStripe(stripe, ctx).paymentIntents.create(CHARGE)).id,
        { maxAttempts: 4, backoff: () => 50 },
      ),
    );
    return { wf, ...(await runOnce(h, wf, {})) };
  }

  it('executed before the 500: the re-send gets the stored 500, the marker lookup finds the object', async () => {
    // Fault: Stripe charged, then answered 500, and stores that 500 under the key.
    const { run, step } = await run500(true);
    expect(run.state, JSON.stringify(step.errors)).toBe('completed');
    expect(fake.requests.map((r) => `${r.method} ${r.outcome}`)).toEqual([
      'POST fault',
      'POST replayed',
      'GET executed',
    ]);
    expect(step.output).toBe(fake.objects('payment_intent')[0]?.id);
    expect(fake.count('charge')).toBe(1);
  });

  it('nothing done before the 500: the lookup proves it, the step fails for an operator, whose retry charges once under #g1', async () => {
    // Fault: a stored 500 with no effect.
    const { wf, run, step, ledger, runId } = await run500(false);
    expect(run.state).toBe('failed');
    expect(step.attempt).toBe(2);
    expect(step.errors[1]?.message).toMatch(/nothing was created/);
    expect(ledger[0]).toMatchObject({ phase: 'failed' });
    expect(fake.count()).toBe(0);
    const worker = new Worker({ client: h.client, workflows: [wf], pollIntervalMs: 25 });
    await worker.start();
    try {
      await h.client.retry(runId, 'charge');
      expect((await h.client.waitForRun(runId, { timeoutMs: 20_000 })).state).toBe('completed');
    } finally {
      await worker.stop();
    }
    expect(postKeys(fake)).toEqual([`${runId}:charge`, `${runId}:charge`, `${runId}:charge#g1`]);
    expect(fake.count('charge')).toBe(1);
  });

  it('a declining card, declined before the 500: the lookup finds the declined intent, and the step fails as a decline instead of returning it', async () => {
    // Fault: Stripe declined the card (the intent exists, with last_payment_error), then
    // answered 500 instead of the 402 and stores that 500 under the key.
    fake.inject({ kind: 'status', status: 500, commit: true }, { method: 'POST' });
    const stripe = fake.client({ maxNetworkRetries: 0 });
    const wf = singleNode(
      newAction(
        actionName('declined_500'),
        async (ctx: Context) =>
          (
            await idempotentStripe(stripe, ctx).paymentIntents.create({
              ...CHARGE,
              payment_method: 'pm_card_chargeDeclined',
            })
          ).id,
        { maxAttempts: 4, backoff: () => 50 },
      ),
    );
    const { run, step, ledger } = await runOnce(h, wf, {});
    expect(fake.requests.map((r) => `${r.method} ${r.outcome}`)).toEqual([
      'POST fault',
      'POST replayed',
      'GET executed',
    ]);
    expect(fake.objects('payment_intent')[0]).toMatchObject({ status: 'requires_payment_method' });
    expect(run.state, JSON.stringify(step.errors)).toBe('failed');
    expect(step.errors[1]?.message).toMatch(/card_declined/);
    expect(ledger[0]).toMatchObject({ phase: 'failed', error: { code: 'card_declined' } });
    expect(fake.count('charge')).toBe(0);
  });
});

describe('classifyStripeError (PROVIDERS.md § 4.2, Stripe row)', () => {
  it("classifies the SDK's real errors", async () => {
    const stripe = fake.client({ maxNetworkRetries: 0, timeout: 100 });
    const fail = (p: Promise<unknown>) =>
      p.then(
        () => expect.fail('resolved'),
        (e: unknown) => e,
      );
    const kinds: Record<string, string> = {};
    for (const [name, status] of [
      ['400', 400],
      ['401', 401],
      ['402', 402],
      ['403', 403],
      ['409', 409],
      ['429', 429],
      ['500', 500],
    ] as const) {
      fake.inject({ kind: 'status', status });
      kinds[name] = classifyStripeError(await fail(stripe.customers.create({}))).kind;
    }
    await stripe.customers.create({}, { idempotencyKey: 'c' });
    kinds.idempotency = classifyStripeError(
      await fail(stripe.customers.create({ name: 'other' }, { idempotencyKey: 'c' })),
    ).kind;
    fake.inject({ kind: 'delay', ms: 400 });
    kinds.timeout = classifyStripeError(await fail(stripe.customers.create({}))).kind;
    fake.inject({ kind: 'reset', commit: true }, { times: 2 });
    kinds.reset = classifyStripeError(await fail(stripe.customers.create({}))).kind;
    await fake.refuseConnections();
    kinds.refused = classifyStripeError(await fail(stripe.customers.create({}))).kind;
    await fake.resume();
    kinds.other = classifyStripeError(new TypeError('not a Stripe error')).kind;
    expect(kinds).toEqual({
      '400': 'definitive',
      '401': 'definitive',
      '402': 'definitive',
      '403': 'definitive',
      '409': 'conflict',
      '429': 'not_sent',
      '500': 'ambiguous',
      idempotency: 'determinism',
      timeout: 'ambiguous',
      reset: 'ambiguous',
      refused: 'not_sent',
      other: 'ambiguous',
    });
    expect(
      classifyStripeError(
        new Stripe.errors.StripeCardError({
          message: 'declined',
          statusCode: 402,
          code: 'card_declined',
        }),
      ),
    ).toMatchObject({
      kind: 'definitive',
      status: 402,
      code: 'card_declined',
    });
  });
});
