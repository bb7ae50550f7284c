/**
 * Issue test 6: two scopes in one handler → two keys, each deduplicated on its own; the keys are
 * the same on every attempt and after an operator retry (ARCHITECTURE.md § Operator retry: the
 * step is reopened in place, so (runId, node) keys keep deduplicating).
 */
import {
  Client,
  type Context,
  NonRetryableError,
  newAction,
  newWorkflow,
  type Worker,
} from '@cyclone/core';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { idempotencyKey, listLedgerEntries, once } from '../src/index.js';
import { createTestDb, type TestDb } from './support/db.js';
import { startWorker } from './support/harness.js';
import { FakeProvider, postEffect } from './support/provider.js';

let db: TestDb;
let client: Client;
let worker: Worker | undefined;
let provider: FakeProvider;
const seen: { attempt: number; keys: string[] }[] = [];

const checkout = newAction(
  'idem_checkout',
  async (ctx: Context) => {
    const keys: string[] = [];
    const customer = await once(ctx, { scope: 'customer', request: { email: 'a@x' } }, (key) => {
      keys.push(key);
      return postEffect(provider.url, key, { email: 'a@x' });
    });
    const payment = await once(ctx, { scope: 'payment', request: { amount: 5 } }, (key) => {
      keys.push(key);
      return postEffect(provider.url, key, { amount: 5 });
    });
    seen.push({
      attempt: ctx.attempt,
      keys: [idempotencyKey(ctx), idempotencyKey(ctx, 'customer'), idempotencyKey(ctx, 'payment')],
    });
    if (ctx.attempt === 1) throw new Error('attempt 1 fails after both calls');
    if (ctx.attempt === 2) throw new NonRetryableError('attempt 2 discards the step');
    return { customer: customer.id, payment: payment.id, calledWith: keys };
  },
  { maxAttempts: 5, backoff: () => 20 },
);
const CheckoutFlow = newWorkflow('idem_checkout', { nodes: { pay: { action: checkout } } });

beforeAll(async () => {
  db = await createTestDb();
  client = new Client({ connectionString: db.url, poolSize: 4 });
  provider = await FakeProvider.start();
});

afterEach(async () => {
  await worker?.stop({ graceMs: 1_000 });
  worker = undefined;
});

afterAll(async () => {
  await provider.close();
  await client.close();
  await db.drop();
});

describe('test 6: two scopes in one handler', () => {
  it('make two keys, each deduplicated on its own, identical across attempts and an operator retry', async () => {
    worker = await startWorker(client, [CheckoutFlow]);
    const { runId } = await client.submit(CheckoutFlow, null);
    const failed = await client.waitForRun(runId, { timeoutMs: 20_000 });
    expect(failed.state).toBe('failed'); // attempt 1 retried, attempt 2 discarded
    await client.retry(runId, 'pay'); // the operator
    const run = await client.waitForRun(runId, { timeoutMs: 20_000 });
    expect(run.state).toBe('completed');

    const customerKey = `${runId}:pay:customer`;
    const paymentKey = `${runId}:pay:payment`;
    // One call per scope, on attempt 1 only.
    expect(provider.received.map((r) => r.key)).toEqual([customerKey, paymentKey]);
    expect(provider.effects.map((e) => e.key)).toEqual([customerKey, paymentKey]);
    expect(seen.map((s) => s.attempt)).toEqual([1, 2, 3]);
    for (const s of seen) expect(s.keys).toEqual([`${runId}:pay`, customerKey, paymentKey]);
    expect(run.steps[0]?.output).toEqual({
      customer: provider.effects[0]?.id,
      payment: provider.effects[1]?.id,
      calledWith: [], // attempt 3 replayed both
    });
    const entries = await listLedgerEntries(client, runId);
    expect(entries.map((e) => [e.key, e.scope, e.phase, e.calls, e.ownerAttempt])).toEqual([
      [customerKey, 'customer', 'succeeded', 1, 1],
      [paymentKey, 'payment', 'succeeded', 1, 1],
    ]);
  });
});
