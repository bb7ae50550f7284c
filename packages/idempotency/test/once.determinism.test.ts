/**
 * Issue test 4: a different request under the same key is a determinism error, with no call —
 * whether the ledger sees it (its request hash) or the provider reports it (a `classify` that
 * maps the provider's idempotency error to `determinism`).
 */
import { Client, type Context, newAction, newWorkflow, type Worker } from '@cyclone/core';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { getLedgerEntry, once } from '../src/index.js';
import { createTestDb, type TestDb } from './support/db.js';
import { startWorker, stepErrors } from './support/harness.js';
import { FakeProvider, HttpError, postEffect } from './support/provider.js';

let db: TestDb;
let client: Client;
let worker: Worker | undefined;
let provider: FakeProvider;

const drifting = newAction(
  'idem_drifting',
  async (ctx: Context) => {
    // A determinism bug: the request depends on the attempt (think Date.now()).
    const amount = 10 * ctx.attempt;
    const r = await once(ctx, { request: { amount } }, (key) =>
      postEffect(provider.url, key, { amount }),
    );
    if (ctx.attempt === 1) throw new Error('crash-like failure after the call');
    return r;
  },
  { maxAttempts: 5, backoff: () => 20 },
);

const providerChecked = newAction(
  'idem_provider_checked',
  async (ctx: Context, input: { amount: number }) =>
    once(
      ctx,
      {
        request: input,
        classify: (err) =>
          err instanceof HttpError &&
          (err.body as { error?: { type?: string } })?.error?.type === 'idempotency_error'
            ? { kind: 'determinism', status: err.status, reason: 'provider idempotency_error' }
            : undefined,
      },
      (key) => postEffect(provider.url, key, input),
    ),
  { maxAttempts: 5, backoff: () => 20 },
);

const Flow = newWorkflow('idem_determinism', {
  nodes: {
    drift: { action: drifting },
  },
});
const ProviderFlow = newWorkflow<{ amount: number }>('idem_determinism_provider', {
  nodes: { pay: { action: providerChecked } },
});

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

describe('test 4: a different request under the same key', () => {
  it('is a non-retryable determinism error and makes no call', async () => {
    provider = await FakeProvider.start();
    worker = await startWorker(client, [Flow]);
    const { runId } = await client.submit(Flow, null);
    const run = await client.waitForRun(runId, { timeoutMs: 20_000 });
    expect(run.state).toBe('failed');
    expect(run.steps[0]).toMatchObject({ state: 'discarded', attempt: 2 });
    const errors = await stepErrors(db.pool, runId, 'drift');
    expect(errors[1]).toMatchObject({ attempt: 2, kind: 'non_retryable' });
    expect(errors[1]?.message).toMatch(/was used with a different request/);
    expect(provider.received).toHaveLength(1);
    // The first (successful) call stays recorded as it was.
    expect(await getLedgerEntry(client, `${runId}:drift`)).toMatchObject({
      phase: 'succeeded',
      result: { request: { amount: 10 } },
    });
  });

  it('reported by the provider (classify → determinism): recorded failed, non-retryable', async () => {
    provider = await FakeProvider.start({ dedupe: true });
    const { runId } = await client.submit(ProviderFlow, { amount: 2 });
    const key = `${runId}:pay`;
    // Someone already used this key at the provider with other parameters (before any worker
    // runs the step).
    await postEffect(provider.url, key, { amount: 1 });
    worker = await startWorker(client, [ProviderFlow]);
    const run = await client.waitForRun(runId, { timeoutMs: 20_000 });
    expect(run.state).toBe('failed');
    expect(run.steps[0]).toMatchObject({ state: 'discarded', attempt: 1 });
    const errors = await stepErrors(db.pool, runId, 'pay');
    expect(errors[0]?.message).toMatch(/different request \(the provider rejected the key/);
    expect(provider.effects).toHaveLength(1); // the seed only
    expect(await getLedgerEntry(client, key)).toMatchObject({
      phase: 'failed',
      error: { outcome: 'determinism', status: 400 },
    });
  });
});
