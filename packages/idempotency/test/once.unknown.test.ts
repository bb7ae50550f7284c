/**
 * Issue test 2: the lost response. The fake performs the effect, then destroys the socket, so
 * the handler cannot know whether it happened; each unknown-outcome policy is exercised.
 */
import { Client, type Context, newAction, newWorkflow, type Worker } from '@cyclone/core';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { getLedgerEntry, once, resolveKey, type UnknownPolicy } from '../src/index.js';
import { createTestDb, type TestDb } from './support/db.js';
import { startWorker, stepErrors } from './support/harness.js';
import { type EffectResponse, FakeProvider, findEffects, postEffect } from './support/provider.js';

let db: TestDb;
let client: Client;
let worker: Worker | undefined;
let provider: FakeProvider;

interface SendInput {
  to: string;
  policy: 'fail' | 'recall' | 'reconcile';
}

const policyOf = (p: SendInput['policy']): UnknownPolicy<EffectResponse> =>
  p === 'reconcile'
    ? async (key) => {
        const found = await findEffects(provider.url, key);
        return found.length === 1 ? found[0] : undefined;
      }
    : p;

const send = newAction(
  'idem_send',
  async (ctx: Context, input: SendInput) =>
    once(
      ctx,
      { request: { to: input.to }, onUnknown: policyOf(input.policy), quietPeriodMs: 300 },
      (key) => postEffect(provider.url, key, { to: input.to }),
    ),
  { maxAttempts: 100, backoff: () => 50 },
);
const SendFlow = newWorkflow<SendInput>('idem_send', { nodes: { send: { action: send } } });

// Few attempts, a short backoff, a quiet period much longer than both: waiting it out must not
// use them up.
const sendFew = newAction(
  'idem_send_few',
  async (ctx: Context, input: SendInput) =>
    once(
      ctx,
      { request: { to: input.to }, onUnknown: policyOf(input.policy), quietPeriodMs: 1_500 },
      (key) => postEffect(provider.url, key, { to: input.to }),
    ),
  { maxAttempts: 2, backoff: () => 10 },
);
const FewFlow = newWorkflow<SendInput>('idem_send_few', { nodes: { send: { action: sendFew } } });

beforeAll(async () => {
  db = await createTestDb();
  client = new Client({ connectionString: db.url, poolSize: 4 });
});

afterEach(async () => {
  await worker?.stop({ graceMs: 1_000 });
  worker = undefined;
  await provider?.close();
});

afterAll(async () => {
  await client.close();
  await db.drop();
});

async function lostResponse(input: SendInput, dedupe = false) {
  provider = await FakeProvider.start({ dedupe });
  provider.inject('drop');
  worker = await startWorker(client, [SendFlow]);
  const { runId } = await client.submit(SendFlow, input);
  const run = await client.waitForRun(runId, { timeoutMs: 20_000 });
  return { runId, key: `${runId}:send`, run };
}

describe('test 2: a lost response (effect performed, connection dropped)', () => {
  it("policy 'fail': the step is discarded with an unknown-outcome error and no second call", async () => {
    const { runId, key, run } = await lostResponse({ to: 'a@example.com', policy: 'fail' });
    expect(run.state).toBe('failed');
    expect(run.steps[0]?.state).toBe('discarded');
    const errors = await stepErrors(db.pool, runId, 'send');
    // Attempt 1 recorded the ambiguous outcome (retryable); attempt 2 snoozed out the quiet
    // period (no error entry), then policy fail discarded the step.
    expect(errors).toHaveLength(2);
    expect(errors[0]).toMatchObject({ attempt: 1, kind: 'error' });
    expect(errors[0]?.message).toMatch(/may or may not have taken effect/);
    expect(run.steps[0]?.snoozes).toBeGreaterThanOrEqual(1);
    const last = errors.at(-1);
    expect(last?.kind).toBe('non_retryable');
    expect(last?.message).toMatch(/unknown outcome for idempotency key/);
    expect(provider.received).toHaveLength(1);
    expect(provider.effects).toHaveLength(1);
    expect(await getLedgerEntry(client, key)).toMatchObject({ phase: 'unknown', calls: 1 });

    // The operator checks the provider, records what happened, and retries: no call.
    const effect = provider.effects[0] as { id: string };
    await resolveKey(client, key, {
      outcome: 'succeeded',
      result: { id: effect.id, key, request: { to: 'a@example.com' } },
      providerRef: effect.id,
    });
    await client.retry(runId, 'send');
    const again = await client.waitForRun(runId, { timeoutMs: 20_000 });
    expect(again.state).toBe('completed');
    expect(again.steps[0]?.output).toMatchObject({ id: effect.id });
    expect(provider.received).toHaveLength(1);
  });

  it("policy 'recall': a second call with the same key (the deduplicating provider replays it)", async () => {
    const { key, run } = await lostResponse({ to: 'b@example.com', policy: 'recall' }, true);
    expect(run.state).toBe('completed');
    expect(provider.received.map((r) => r.key)).toEqual([key, key]);
    expect(provider.received[1]?.replayed).toBe(true);
    expect(provider.effects).toHaveLength(1);
    expect(run.steps[0]?.output).toMatchObject({ id: provider.effects[0]?.id });
    expect(await getLedgerEntry(client, key)).toMatchObject({ phase: 'succeeded', calls: 2 });
  });

  it('a reconcile function that finds the effect: succeeded, no second call', async () => {
    const { key, run } = await lostResponse({ to: 'c@example.com', policy: 'reconcile' });
    expect(run.state).toBe('completed');
    expect(provider.received).toHaveLength(1);
    expect(provider.lookups).toBeGreaterThanOrEqual(1);
    expect(run.steps[0]?.output).toMatchObject({ id: provider.effects[0]?.id, key });
    expect(await getLedgerEntry(client, key)).toMatchObject({ phase: 'succeeded', calls: 1 });
  });

  it('the quiet period is waited out by a snooze, so the policy runs with 2 attempts and a 10 ms backoff', async () => {
    provider = await FakeProvider.start();
    provider.inject('drop');
    worker = await startWorker(client, [FewFlow]);
    const { runId } = await client.submit(FewFlow, { to: 'd@example.com', policy: 'reconcile' });
    const run = await client.waitForRun(runId, { timeoutMs: 20_000 });
    expect(run.state).toBe('completed');
    const step = run.steps[0];
    expect(step?.errors.map((e) => e.message)).toEqual([
      expect.stringMatching(/may or may not have taken effect/),
    ]);
    expect(step?.snoozes).toBeGreaterThanOrEqual(1);
    // Attempts used: the lost call, then the reconcile; the snoozes gave theirs back.
    expect((step?.attempt ?? 0) - (step?.snoozes ?? 0)).toBe(2);
    expect(step?.output).toMatchObject({ id: provider.effects[0]?.id });
    expect(provider.received).toHaveLength(1);
    expect(provider.lookups).toBe(1);
  });
});
