/**
 * The other outcomes of a call (PROVIDERS.md § 4.2, step 3): a definitive failure is recorded
 * and replayed, an operator retry calls again under a fresh generation (`#g1`), and a call the
 * provider rate-limited is made again with the same key after a snooze.
 */
import { Client, type Context, newAction, newWorkflow, type Worker } from '@cyclone/core';
import { waitFor } from '@cyclone/testkit';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { DefinitiveFailureError, getLedgerEntry, once } from '../src/index.js';
import { createTestDb, type TestDb } from './support/db.js';
import { startWorker, stepErrors } from './support/harness.js';
import { type EffectResponse, FakeProvider, postEffect } from './support/provider.js';

let db: TestDb;
let client: Client;
let worker: Worker | undefined;
let provider: FakeProvider;

const pay = newAction(
  'idem_pay',
  async (ctx: Context, input: { wrap: boolean }) => {
    try {
      return await once(
        ctx,
        { request: { amount: 5 }, provider: 'fake', reference: (r: EffectResponse) => r.id },
        (key) => postEffect(provider.url, key, { amount: 5 }),
      );
    } catch (err) {
      // A handler that turns the definitive error into a retryable one (attempt 1 only).
      if (input.wrap && ctx.attempt === 1 && err instanceof DefinitiveFailureError) {
        throw new Error(`wrapped: ${err.message}`);
      }
      throw err;
    }
  },
  { maxAttempts: 5, backoff: () => 20 },
);
const PayFlow = newWorkflow<{ wrap: boolean }>('idem_pay', { nodes: { pay: { action: pay } } });

beforeAll(async () => {
  db = await createTestDb();
  client = new Client({ connectionString: db.url, poolSize: 4 });
});

afterEach(async () => {
  await worker?.stop({ graceMs: 1_000 });
  worker = undefined;
  await provider.close();
});

afterAll(async () => {
  await client.close();
  await db.drop();
});

async function start(input: { wrap: boolean }) {
  worker = await startWorker(client, [PayFlow]);
  const { runId } = await client.submit(PayFlow, input);
  return { runId, key: `${runId}:pay` };
}

describe('a definitive failure', () => {
  it('is recorded and discards the step; an operator retry calls again with key#g1', async () => {
    provider = await FakeProvider.start();
    provider.inject({ status: 402, code: 'card_declined' });
    const { runId, key } = await start({ wrap: false });
    const failed = await client.waitForRun(runId, { timeoutMs: 20_000 });
    expect(failed.steps[0]).toMatchObject({ state: 'discarded', attempt: 1 });
    expect((await stepErrors(db.pool, runId, 'pay'))[0]?.message).toMatch(
      /failed definitively: provider answered HTTP 402/,
    );
    expect(await getLedgerEntry(client, key)).toMatchObject({
      phase: 'failed',
      generation: 0,
      error: { outcome: 'definitive', status: 402, name: 'HttpError' },
    });

    await client.retry(runId, 'pay');
    const run = await client.waitForRun(runId, { timeoutMs: 20_000 });
    expect(run.state).toBe('completed');
    expect(provider.received.map((r) => r.key)).toEqual([key, `${key}#g1`]);
    expect(await getLedgerEntry(client, key)).toMatchObject({
      phase: 'succeeded',
      generation: 1,
      ownerAttempt: 2,
      calls: 2,
      providerRef: provider.effects[0]?.id,
    });
  });

  it('is replayed without a call on an automatic retry; only an operator retry bumps the generation', async () => {
    provider = await FakeProvider.start();
    provider.inject({ status: 400 });
    const { runId, key } = await start({ wrap: true });
    const failed = await client.waitForRun(runId, { timeoutMs: 20_000 });
    expect(failed.steps[0]).toMatchObject({ state: 'discarded', attempt: 2 });
    const errors = await stepErrors(db.pool, runId, 'pay');
    expect(errors.map((e) => e.kind)).toEqual(['error', 'non_retryable']);
    expect(errors[1]?.message).toMatch(/^replayed from the ledger, not called: /);
    expect(provider.received).toHaveLength(1);

    await client.retry(runId, 'pay');
    const run = await client.waitForRun(runId, { timeoutMs: 20_000 });
    expect(run.state).toBe('completed');
    expect(provider.received.map((r) => r.key)).toEqual([key, `${key}#g1`]);
  });
});

describe('a call the provider rate-limited (HTTP 429): a snooze, not an attempt', () => {
  it('Retry-After: 1 → recorded as not sent, called again with the same key ≥ 1 s later, no attempt used', async () => {
    provider = await FakeProvider.start();
    provider.inject({ status: 429, headers: { 'retry-after': '1' } });
    // The default quiet period is 60 s: had "not sent" been taken for an unknown outcome, the
    // next attempt would wait it out and this test would time out.
    const { runId, key } = await start({ wrap: false });
    const run = await client.waitForRun(runId, { timeoutMs: 10_000 });
    expect(run.state).toBe('completed');
    const step = run.steps[0];
    // The snooze gave back the attempt its claim counted: attempts left are what they were.
    expect(step?.snoozes).toBe(1);
    expect(step?.attempt).toBe(2);
    expect(step?.maxAttempts).toBe(6);
    expect(step?.errors).toEqual([]);
    const [first, second] = provider.received;
    expect(provider.received.map((r) => r.key)).toEqual([key, key]);
    expect((second?.at.getTime() ?? 0) - (first?.at.getTime() ?? 0)).toBeGreaterThanOrEqual(1_000);
    expect(await getLedgerEntry(client, key)).toMatchObject({
      phase: 'succeeded',
      generation: 0,
      calls: 2,
      error: { outcome: 'not_sent', status: 429 },
    });
  });

  it('no time named → the rate-limit backoff (1 s on the first call), still no attempt used', async () => {
    provider = await FakeProvider.start();
    provider.inject({ status: 429 });
    const { runId, key } = await start({ wrap: false });
    const run = await client.waitForRun(runId, { timeoutMs: 10_000 });
    expect(run.state).toBe('completed');
    expect(run.steps[0]).toMatchObject({ snoozes: 1, attempt: 2, maxAttempts: 6, errors: [] });
    const [first, second] = provider.received;
    expect(provider.received.map((r) => r.key)).toEqual([key, key]);
    expect((second?.at.getTime() ?? 0) - (first?.at.getTime() ?? 0)).toBeGreaterThanOrEqual(1_000);
  });

  it('a 503 with Retry-After stays an ambiguous outcome (it may have been executed): an attempt is used', async () => {
    provider = await FakeProvider.start();
    provider.inject({ status: 503, headers: { 'retry-after': '1' } });
    const { runId } = await start({ wrap: false });
    // Policy fail (once's default) after the 60 s quiet period: the step snoozes, not fails.
    const step = await waitFor('the snooze of attempt 2', async () => {
      const s = (await client.getRun(runId)).steps[0];
      return s && s.snoozes >= 1 ? s : undefined;
    });
    expect(step.errors.map((e) => e.message)).toEqual([
      expect.stringMatching(/may or may not have taken effect \(HTTP 503\)/),
    ]);
    expect(step.state).toBe('scheduled');
    expect(provider.received).toHaveLength(1);
  });
});
