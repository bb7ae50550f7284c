/**
 * A workflow that charges a card can crash at any point and the fake records exactly one charge.
 * A real worker child process (stripe-worker.ts) is SIGKILLed inside the charge step; an
 * in-process worker then rescues the step after its lease expires (the scenarios of
 * @cyclone/testkit-engine's `crashSuite`, plus the answer lost on its way).
 */
import { getLedgerEntry } from '@cyclone/idempotency';
import { waitFor } from '@cyclone/testkit';
import { crashSuite } from '@cyclone/testkit-engine';
import { expect, it } from 'vitest';
import { FakeStripe } from '../src/testing/index.js';
import { CrashCharge, configureCrash } from './support/crash-flows.js';
import { createTestDb } from './support/db.js';
import { inspect } from './support/harness.js';

const crash = crashSuite({
  provider: 'Stripe',
  call: 'charge',
  workflow: CrashCharge,
  node: 'charge',
  lines: { calling: 'CALLING', called: 'CHARGED' },
  refPattern: 'pi_\\w+',
  script: new URL('./support/stripe-worker.ts', import.meta.url),
  readyTimeoutMs: 30_000,
  input: { amount: 1999 },
  createTestDb,
  startFake: async () => {
    const fake = await FakeStripe.start();
    configureCrash({
      stripe: fake.client({ maxNetworkRetries: 0 }),
      emit: () => {},
      victim: false,
    });
    return fake;
  },
  childEnv: (fake) => ({
    FAKE_STRIPE_PORT: String(fake.port),
    CRASH_VICTIM: '1',
    STRIPE_SUPPRESS_NOTICES: 'true',
  }),
  firstRef: (fake) => fake.objects('payment_intent')[0]?.id,
  performed: (fake) => fake.count('charge') === 1,
  // Attempt 2 got the charge from the ledger: one POST in all, one charge.
  expectOneCall: (fake) => {
    expect(fake.requests.map((r) => `${r.method} ${r.path}`)).toEqual(['POST /v1/payment_intents']);
    expect(fake.count('charge')).toBe(1);
  },
  expectOutput: (output, paymentIntent) =>
    expect(output).toMatchObject({ paymentIntent, attempt: 2 }),
  ledgerEntry: getLedgerEntry,
});

it("SIGKILL while Stripe's answer is on the way (charged at Stripe, ledger still 'started'): exactly one charge", async () => {
  const { fake, client } = crash;
  // Fault: the fake commits the charge and holds the answer back; the worker dies waiting.
  fake.inject({ kind: 'delay', ms: 60_000 }, { method: 'POST' });
  const child = await crash.victim();
  const { runId } = await client.submit(CrashCharge, { amount: 2500 });
  await waitFor('the charge at the fake', () => fake.count('charge') === 1);
  await child.kill();
  const before = await inspect(crash, runId);
  expect(before.ledger[0]).toMatchObject({ phase: 'started', ownerAttempt: 1 });
  expect(before.ledger[0]?.callStartedAt).not.toBeNull();

  await crash.rescue(runId);
  const { run, step, runId: id } = await inspect(crash, runId);
  expect(run.state, JSON.stringify(step.errors)).toBe('completed');
  // Attempt 2 re-sent the same key within Stripe's window and got the stored answer.
  const posts = fake.requestsTo('POST', '/v1/payment_intents');
  expect(posts.map((r) => r.idempotencyKey)).toEqual([`${id}:charge`, `${id}:charge`]);
  expect(posts[1]?.outcome).toBe('replayed');
  expect(fake.count('charge')).toBe(1);
  expect(step.output).toMatchObject({ paymentIntent: fake.objects('payment_intent')[0]?.id });
});
