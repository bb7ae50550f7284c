/**
 * The seven must-have tests of PROVIDERS.md § 5.1, with real `@cyclone/core` Workers on a real
 * PostgreSQL database, the ledger of `@cyclone/idempotency`, and the real `stripe` SDK talking to
 * the fake over loopback. Each test names the fault it injects.
 */
import { createHash } from 'node:crypto';
import { type Context, newAction, Worker } from '@cyclone/core';
import Stripe from 'stripe';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { idempotentStripe } from '../src/index.js';
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

const CHARGE = {
  amount: 4200,
  currency: 'usd',
  payment_method: 'pm_card_visa',
  confirm: true,
} as const;

/** A charge action: `idempotentStripe(client, ctx).paymentIntents.create(params(ctx))`. */
function chargeAction(
  client: () => Stripe,
  options: {
    params?: (ctx: Context) => Stripe.PaymentIntentCreateParams;
    after?: (ctx: Context, pi: Stripe.Response<Stripe.PaymentIntent>) => void;
    scope?: string;
    maxAttempts?: number;
  } = {},
) {
  return newAction(
    actionName('charge'),
    async (ctx: Context) => {
      const stripe = idempotentStripe(client(), ctx, { scope: options.scope });
      const pi = await stripe.paymentIntents.create(options.params?.(ctx) ?? CHARGE);
      options.after?.(ctx, pi);
      return { paymentIntent: pi.id, attempt: ctx.attempt };
    },
    { maxAttempts: options.maxAttempts ?? 5, backoff: () => 50 },
  );
}

describe('PROVIDERS.md § 5.1 must-have tests', () => {
  it('1. the key is ours, passed on every POST, and stable across handler attempts', async () => {
    // Fault: the response is lost twice (effect, then socket destroyed; the SDK's own
    // closed-connection retry is dropped too), so attempt 1 ends ambiguous and attempt 2
    // re-sends under the same key.
    fake.inject({ kind: 'reset', commit: true }, { method: 'POST', times: 2 });
    const stripe = fake.client({ maxNetworkRetries: 0 });
    const wf = singleNode(chargeAction(() => stripe));
    const { run, step, runId } = await runOnce(h, wf, {});
    expect(run.state, JSON.stringify(step.errors)).toBe('completed');
    expect(step.attempt).toBe(2);
    expect(step.errors[0]?.message).toMatch(/may or may not have taken effect/);
    const keys = postKeys(fake);
    expect(keys).toEqual([`${runId}:charge`, `${runId}:charge`, `${runId}:charge`]);
    expect(keys.some((k) => k?.startsWith('stripe-node-retry-'))).toBe(false);
    expect(fake.count('charge')).toBe(1);
    const [pi] = fake.objects('payment_intent');
    expect((step.output as { paymentIntent: string }).paymentIntent).toBe(pi?.id);
    expect(pi?.metadata).toEqual({
      cyclone_key: `${runId}:charge`,
      cyclone_run_id: runId,
      cyclone_node: 'charge',
    });
  });

  it("2. lost response at maxNetworkRetries 0: the SDK's closed-connection retry gets the replay, one effect", async () => {
    // Fault: effect committed, then the socket destroyed once.
    fake.inject({ kind: 'reset', commit: true }, { method: 'POST' });
    const stripe = fake.client({ maxNetworkRetries: 0 });
    const wf = singleNode(chargeAction(() => stripe));
    const { run, step, ledger, runId } = await runOnce(h, wf, {});
    expect(run.state).toBe('completed');
    expect(step.attempt).toBe(1);
    expect(fake.requests.map((r) => [r.idempotencyKey, r.outcome])).toEqual([
      [`${runId}:charge`, 'fault'],
      [`${runId}:charge`, 'replayed'],
    ]);
    expect(fake.count('payment_intent')).toBe(1);
    expect(fake.count('charge')).toBe(1);
    const pi = fake.objects('payment_intent')[0];
    expect(ledger).toHaveLength(1);
    expect(ledger[0]).toMatchObject({
      key: `${runId}:charge`,
      phase: 'succeeded',
      providerRef: pi?.id,
      provider: 'stripe',
      operation: 'POST /v1/payment_intents',
    });
  });

  it('3. crash after success, before the step completes: the next attempt replays the ledger with zero HTTP calls', async () => {
    // Fault: the handler dies (throws) after Stripe succeeded and the ledger recorded it.
    const stripe = fake.client({ maxNetworkRetries: 0 });
    const seen: { attempt: number; id: string; replayed: string | undefined }[] = [];
    const wf = singleNode(
      chargeAction(() => stripe, {
        after: (ctx, pi) => {
          seen.push({
            attempt: ctx.attempt,
            id: pi.id,
            replayed: pi.lastResponse.headers['cyclone-replayed'],
          });
          if (ctx.attempt === 1) throw new Error('crash after the charge, before completion');
        },
      }),
    );
    const { run, step } = await runOnce(h, wf, {});
    expect(run.state).toBe('completed');
    expect(step.attempt).toBe(2);
    expect(fake.requests).toHaveLength(1);
    expect(fake.count('charge')).toBe(1);
    expect(seen[0]?.replayed).toBeUndefined();
    expect(seen[1]).toEqual({ attempt: 2, id: seen[0]?.id, replayed: 'ledger' });
  });

  it('4. different params on retry: a non-retryable determinism error, and no call', async () => {
    // Fault: the handler is not deterministic (the amount depends on the attempt) and attempt 1
    // dies after its charge.
    const stripe = fake.client({ maxNetworkRetries: 0 });
    const wf = singleNode(
      chargeAction(() => stripe, {
        params: (ctx) => ({ ...CHARGE, amount: 1000 + ctx.attempt }),
        after: (ctx) => {
          if (ctx.attempt === 1) throw new Error('crash after the charge');
        },
      }),
    );
    const { run, step, ledger } = await runOnce(h, wf, {});
    expect(run.state).toBe('failed');
    expect(step.state).toBe('discarded');
    expect(step.attempt).toBe(2);
    expect(step.errors[1]?.message).toMatch(/different request/);
    expect(fake.requests).toHaveLength(1);
    expect(ledger[0]?.phase).toBe('succeeded');
  });

  it("4b. Stripe's own StripeIdempotencyError (same key, other parameters at Stripe) is a determinism error", async () => {
    // Fault: Stripe already holds this key with other parameters (the ledger does not know it):
    // the handler pre-uses its own key, outside the adapter, on its first attempt.
    const stripe = fake.client({ maxNetworkRetries: 0 });
    let preused = false;
    const wfPre = singleNode(
      newAction(
        actionName('preuse'),
        async (ctx: Context) => {
          if (!preused) {
            preused = true;
            await stripe.paymentIntents.create(
              { amount: 1, currency: 'eur' },
              { idempotencyKey: `${ctx.runId}:charge` },
            );
          }
          const s = idempotentStripe(stripe, ctx);
          return (await s.paymentIntents.create(CHARGE)).id;
        },
        { maxAttempts: 3, backoff: () => 50 },
      ),
    );
    const { run, step, ledger } = await runOnce(h, wfPre, {});
    expect(run.state).toBe('failed');
    expect(step.attempt).toBe(1);
    expect(step.errors[0]?.message).toMatch(/different request/);
    expect(ledger[0]?.phase).toBe('failed');
    expect(ledger[0]?.error?.outcome).toBe('determinism');
    expect(fake.requests.map((r) => r.outcome)).toEqual(['executed', 'idempotency_mismatch']);
  });

  it('5. 409 while the first request is in flight: back off, then success under the same key', async () => {
    // Fault: Stripe holds the first request (in flight) past the client's 300 ms timeout; the
    // re-sends get 409 idempotency_key_in_use until the test lets the first one finish.
    const hold = fake.inject({ kind: 'hold' }, { method: 'POST' });
    const stripe = fake.client({ maxNetworkRetries: 0, timeout: 300 });
    const wf = singleNode(chargeAction(() => stripe, { maxAttempts: 20 }));
    const done = runOnce(h, wf, {});
    await fake.waitForRequest((r) => r.outcome === 'conflict');
    hold.release();
    const { run, step, runId } = await done;
    expect(run.state, JSON.stringify(step.errors)).toBe('completed');
    const outcomes = fake.requests.map((r) => r.outcome);
    expect(outcomes[0]).toBe('executed');
    expect(outcomes).toContain('conflict');
    expect(outcomes.at(-1)).toBe('replayed');
    expect(new Set(postKeys(fake))).toEqual(new Set([`${runId}:charge`]));
    expect(step.errors.some((e) => /busy/.test(e.message))).toBe(true);
    expect(fake.count('charge')).toBe(1);
  });

  it('6. a 402 is recorded as definitive; the operator retry sends generation #g1 and charges once', async () => {
    // Fault: a card decline (HTTP 402, executed and stored by Stripe under the key).
    fake.inject({ kind: 'status', status: 402 }, { method: 'POST' });
    const stripe = fake.client({ maxNetworkRetries: 0 });
    const wf = singleNode(chargeAction(() => stripe));
    const first = await runOnce(h, wf, {});
    const { runId } = first;
    expect(first.run.state).toBe('failed');
    expect(first.step.state).toBe('discarded');
    expect(first.step.attempt).toBe(1);
    expect(first.step.errors[0]?.message).toMatch(/failed definitively/);
    expect(first.ledger[0]).toMatchObject({ phase: 'failed', generation: 0 });
    expect(first.ledger[0]?.error).toMatchObject({
      outcome: 'definitive',
      status: 402,
      code: 'card_declined',
    });
    // Stripe keeps the decline under the old key: re-sending it would only replay the 402.
    const replay = await stripe.paymentIntents
      .create(
        {
          ...CHARGE,
          metadata: {
            cyclone_key: `${runId}:charge`,
            cyclone_run_id: runId,
            cyclone_node: 'charge',
          },
        },
        { idempotencyKey: `${runId}:charge` },
      )
      .catch((e: unknown) => e);
    expect(replay).toBeInstanceOf(Stripe.errors.StripeCardError);

    // The operator fixes the card and retries the node.
    const w = new Worker({
      client: h.client,
      workflows: [wf],
      pollIntervalMs: 25,
      sweepIntervalMs: 200,
    });
    await w.start();
    try {
      await h.client.retry(runId, 'charge');
      const run = await h.client.waitForRun(runId, { timeoutMs: 20_000 });
      expect(run.state).toBe('completed');
    } finally {
      await w.stop();
    }
    expect(postKeys(fake)).toEqual([`${runId}:charge`, `${runId}:charge`, `${runId}:charge#g1`]);
    expect(fake.count('charge')).toBe(1);
    const pi = fake.objects('payment_intent')[0];
    expect(pi?.metadata).toMatchObject({ cyclone_key: `${runId}:charge#g1` });
  });

  it('7. a key longer than 255 characters is hashed, and stays stable across attempts', async () => {
    // Fault: the response is lost twice, so attempt 2 re-sends the (hashed) key.
    fake.inject({ kind: 'reset', commit: true }, { method: 'POST', times: 2 });
    const stripe = fake.client({ maxNetworkRetries: 0 });
    const scope = 's'.repeat(200);
    const node = 'charge_with_a_rather_long_node_name';
    const wf = singleNode(
      chargeAction(() => stripe, { scope }),
      node,
    );
    const { run, step, runId, ledger } = await runOnce(h, wf, {});
    expect(run.state, JSON.stringify(step.errors)).toBe('completed');
    const full = `${runId}:${node}:${scope}`;
    expect(full.length).toBeGreaterThan(255);
    const expected = `${full.slice(0, 255 - 66)}#h${createHash('sha256').update(full).digest('hex')}`;
    const keys = postKeys(fake);
    expect(keys).toHaveLength(3);
    for (const k of keys) {
      expect(k).toBe(expected);
      expect(k?.length).toBe(255);
    }
    expect(ledger[0]?.key).toBe(full);
    expect(fake.count('charge')).toBe(1);
  });
});
