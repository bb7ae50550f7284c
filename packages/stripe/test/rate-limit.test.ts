/**
 * A rate-limit answer is a snooze, not an attempt: Stripe's 429 sits in front of its idempotency
 * layer (nothing ran, nothing is stored under the key), so the ledger records the call as not
 * sent and the step waits for the time `Retry-After` names, then sends again with the same key.
 * Real `@cyclone/core` Workers on PostgreSQL, the real `stripe` SDK against the fake. Each test
 * names the fault it injects.
 */
import { type Context, newAction } from '@cyclone/core';
import { getLedgerEntry, RateLimitedError } from '@cyclone/idempotency';
import { expectNoAttemptUsed } from '@cyclone/testkit-engine';
import type Stripe from 'stripe';
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

function chargeAction(client: () => Stripe) {
  return newAction(
    actionName('charge_rl'),
    async (ctx: Context) => {
      const pi = await idempotentStripe(client(), ctx).paymentIntents.create(CHARGE);
      return { paymentIntent: pi.id };
    },
    { maxAttempts: 5, backoff: () => 50 },
  );
}

describe('a 429 from Stripe', () => {
  it('Retry-After: 2 → recorded as not sent, the next POST reaches Stripe ≥ 2 s later with the same key, no attempt used (fault: 429 + Retry-After)', async () => {
    fake.inject(
      { kind: 'status', status: 429, headers: { 'retry-after': '2' } },
      { method: 'POST' },
    );
    const stripe = fake.client({ maxNetworkRetries: 0 });
    const { run, step, runId } = await runOnce(h, singleNode(chargeAction(() => stripe)), {});
    expect(run.state).toBe('completed');
    expectNoAttemptUsed(step, { maxAttempts: 5, used: 1 });
    const key = `${runId}:charge`;
    const posts = fake.requests.filter((r) => r.method === 'POST');
    expect(postKeys(fake)).toEqual([key, key]);
    expect(posts.map((r) => r.outcome)).toEqual(['fault', 'executed']);
    expect((posts[1]?.at.getTime() ?? 0) - (posts[0]?.at.getTime() ?? 0)).toBeGreaterThanOrEqual(
      2_000,
    );
    expect(fake.count('payment_intent')).toBe(1);
    expect(await getLedgerEntry(h.client, key)).toMatchObject({
      phase: 'succeeded',
      calls: 2,
      error: { outcome: 'not_sent', status: 429 },
    });
  });

  it('classified from the real SDK error: rate-limited, with the wait its Retry-After names; a 503 stays ambiguous (fault: 429, 503)', async () => {
    const stripe = fake.client({ maxNetworkRetries: 0 });
    const fail = (p: Promise<unknown>) =>
      p.then(
        () => expect.fail('resolved'),
        (e: unknown) => e,
      );
    fake.inject({ kind: 'status', status: 429, headers: { 'retry-after': '7' } });
    expect(classifyStripeError(await fail(stripe.customers.create({})))).toMatchObject({
      kind: 'not_sent',
      status: 429,
      rateLimited: true,
      retryAfterMs: 7_000,
    });
    fake.inject({ kind: 'status', status: 429 });
    const bare = classifyStripeError(await fail(stripe.customers.create({})));
    expect(bare).toMatchObject({ kind: 'not_sent', rateLimited: true });
    expect(bare.retryAfterMs).toBeUndefined();
    // Stripe stores an executed 5xx under the key: a 503 may have run, Retry-After or not.
    fake.inject(
      {
        kind: 'status',
        status: 503,
        headers: { 'retry-after': '1', 'stripe-should-retry': 'false' },
      },
      { times: 1 },
    );
    const unavailable = classifyStripeError(await fail(stripe.customers.create({})));
    expect(unavailable.kind).toBe('ambiguous');
    expect(unavailable.rateLimited).toBeUndefined();
  });

  it('the handler sees a RateLimitedError (a SnoozeError) when it looks (fault: 429 + Retry-After)', async () => {
    fake.inject(
      { kind: 'status', status: 429, headers: { 'retry-after': '1' } },
      { method: 'POST' },
    );
    const stripe = fake.client({ maxNetworkRetries: 0 });
    const seen: unknown[] = [];
    const action = newAction(
      actionName('charge_seen'),
      async (ctx: Context) => {
        try {
          return (await idempotentStripe(stripe, ctx).paymentIntents.create(CHARGE)).id;
        } catch (err) {
          seen.push(err);
          throw err;
        }
      },
      { maxAttempts: 1 },
    );
    const { run, step } = await runOnce(h, singleNode(action), {});
    // One attempt allowed, and the snooze did not use it.
    expect(run.state).toBe('completed');
    expectNoAttemptUsed(step, { maxAttempts: 1, used: 1 });
    expect(seen).toHaveLength(1);
    const err = seen[0] as RateLimitedError;
    expect(RateLimitedError.isInstance(err)).toBe(true);
    expect(err).toMatchObject({
      code: 'IDEMPOTENCY_RATE_LIMITED',
      delayMs: 1_000,
      retryAfterMs: 1_000,
    });
    expect((err.cause as { statusCode?: number }).statusCode).toBe(429);
  });
});
