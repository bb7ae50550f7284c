/**
 * "A workflow that charges a card can crash at any point and the fake records exactly one
 * charge" (issue 4, Done means). A real worker child process is SIGKILLed inside the charge step;
 * an in-process worker then rescues the step after its lease expires.
 */
import { Worker } from '@cyclone/core';
import { killAllChildren, waitFor } from '@cyclone/testkit';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { FakeStripe } from '../src/testing/index.js';
import { spawnStripeWorker } from './support/child.js';
import { CrashCharge, configureCrash } from './support/crash-flows.js';
import { type FileHarness, fileHarness, inspect } from './support/harness.js';

let h: FileHarness;
let fake: FakeStripe;

beforeAll(async () => {
  h = await fileHarness();
});
afterAll(async () => {
  await h?.close();
});
beforeEach(async () => {
  fake = await FakeStripe.start();
  configureCrash({ stripe: fake.client({ maxNetworkRetries: 0 }), emit: () => {}, victim: false });
});
afterEach(async () => {
  await killAllChildren();
  await fake.close();
});

/** Starts the in-process rescuer and waits for the run to finish. */
async function rescue(runId: string) {
  const worker = new Worker({
    client: h.client,
    workflows: [CrashCharge],
    leaseMs: 2000,
    sweepIntervalMs: 200,
    pollIntervalMs: 50,
  });
  await worker.start();
  try {
    await h.client.waitForRun(runId, { timeoutMs: 20_000 });
  } finally {
    await worker.stop();
  }
  return inspect(h, runId);
}

describe('SIGKILL of a real worker process inside the charge step', () => {
  it('after the charge and before the completion: exactly one charge, no second HTTP call', async () => {
    const child = await spawnStripeWorker({
      databaseUrl: h.db.url,
      fakePort: fake.port,
      victim: true,
    });
    const { runId } = await h.client.submit(CrashCharge, { amount: 1999 });
    const m = await child.waitForLine(new RegExp(`^CHARGED ${runId} 1 (pi_\\w+)$`));
    await child.kill();
    expect(child.exit?.signal).toBe('SIGKILL');
    expect((await inspect(h, runId)).step.state).toBe('running');

    const { run, step, ledger } = await rescue(runId);
    expect(run.state).toBe('completed');
    expect(step.attempt).toBe(2);
    expect(step.output).toMatchObject({ paymentIntent: m[1], attempt: 2 });
    expect(ledger[0]).toMatchObject({ phase: 'succeeded', providerRef: m[1], ownerAttempt: 1 });
    // Attempt 2 got the charge from the ledger: one POST in all, one charge.
    expect(fake.requests.map((r) => `${r.method} ${r.path}`)).toEqual(['POST /v1/payment_intents']);
    expect(fake.count('charge')).toBe(1);
  });

  it("while Stripe's answer is on the way (charged at Stripe, ledger still 'started'): exactly one charge", async () => {
    // Fault: the fake commits the charge and holds the answer back; the worker dies waiting.
    fake.inject({ kind: 'delay', ms: 60_000 }, { method: 'POST' });
    const child = await spawnStripeWorker({
      databaseUrl: h.db.url,
      fakePort: fake.port,
      victim: true,
    });
    const { runId } = await h.client.submit(CrashCharge, { amount: 2500 });
    await waitFor('the charge at the fake', () => fake.count('charge') === 1);
    await child.kill();
    const before = await inspect(h, runId);
    expect(before.ledger[0]).toMatchObject({ phase: 'started', ownerAttempt: 1 });
    expect(before.ledger[0]?.callStartedAt).not.toBeNull();

    const { run, step, runId: id } = await rescue(runId);
    expect(run.state, JSON.stringify(step.errors)).toBe('completed');
    // Attempt 2 re-sent the same key within Stripe's window and got the stored answer.
    const posts = fake.requestsTo('POST', '/v1/payment_intents');
    expect(posts.map((r) => r.idempotencyKey)).toEqual([`${id}:charge`, `${id}:charge`]);
    expect(posts[1]?.outcome).toBe('replayed');
    expect(fake.count('charge')).toBe(1);
    expect(step.output).toMatchObject({ paymentIntent: fake.objects('payment_intent')[0]?.id });
  });
});
