/**
 * Issue test 5: 50 concurrent `once` calls for the same key, from different connections →
 * exactly one provider call. The ledger row's unique key serialises them; a loser sees the
 * winner's call in flight (retryable conflict) or its stored result — never a second call.
 */
import { Client, type Context, newAction, newWorkflow, type Worker } from '@cyclone/core';
import { waitFor } from '@cyclone/testkit';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { getLedgerEntry, IdempotencyConflictError, once } from '../src/index.js';
import { createTestDb, type TestDb } from './support/db.js';
import { startWorker } from './support/harness.js';
import { type EffectResponse, FakeProvider, postEffect } from './support/provider.js';

const N = 50;

let db: TestDb;
let client: Client;
let worker: Worker | undefined;
let provider: FakeProvider;
let settled = 0;

const guarded = (ctx: Context) =>
  once(ctx, { request: { sku: 'x' } }, (key) => postEffect(provider.url, key, { sku: 'x' }));

/** Each of the 50 calls gets its own ctx object, so nothing is shared in memory. */
const fanOut = newAction(
  'idem_fan_out',
  async (ctx: Context) => {
    const outcomes = await Promise.all(
      Array.from({ length: N }, () =>
        guarded({ ...ctx })
          .then((r: EffectResponse) => ({ ok: r.id }))
          .catch((err: unknown) => ({
            conflict: err instanceof IdempotencyConflictError,
            error: String(err),
          }))
          .finally(() => {
            settled++;
          }),
      ),
    );
    return { outcomes };
  },
  { maxAttempts: 1 },
);

/** 50 calls on the same ctx (a handler's Promise.all): they run one after another. */
const sameCtx = newAction(
  'idem_same_ctx',
  async (ctx: Context) => {
    const results = await Promise.all(Array.from({ length: N }, () => guarded(ctx)));
    return { ids: results.map((r) => r.id) };
  },
  { maxAttempts: 1 },
);

const FanOutFlow = newWorkflow('idem_fan_out', { nodes: { buy: { action: fanOut } } });
const SameCtxFlow = newWorkflow('idem_same_ctx', { nodes: { buy: { action: sameCtx } } });

beforeAll(async () => {
  db = await createTestDb();
  // ctx.client's pool carries the ledger statements: room for all 50 at once.
  client = new Client({ connectionString: db.url, poolSize: N + 5 });
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

describe('test 5: 50 concurrent once() calls for one key', () => {
  it('from 50 contexts on different connections: exactly one provider call', async () => {
    provider = await FakeProvider.start();
    provider.inject('hold'); // the winner's call stays in flight until all others settled
    settled = 0;
    worker = await startWorker(client, [FanOutFlow]);
    const { runId } = await client.submit(FanOutFlow, null);
    await waitFor('49 losers settled, 1 call in flight', () => settled === N - 1);
    expect(provider.holding).toBe(1);
    provider.release();
    const run = await client.waitForRun(runId, { timeoutMs: 20_000 });
    expect(run.state).toBe('completed');
    const output = run.steps[0]?.output as { outcomes: { ok?: string; conflict?: boolean }[] };
    const outcomes = output.outcomes;
    expect(outcomes.filter((o) => o.ok)).toEqual([{ ok: provider.effects[0]?.id }]);
    expect(outcomes.filter((o) => o.conflict)).toHaveLength(N - 1);
    expect(provider.received).toHaveLength(1);
    expect(await getLedgerEntry(client, `${runId}:buy`)).toMatchObject({
      phase: 'succeeded',
      calls: 1,
    });
  });

  it('on one context: one call, all 50 get its result', async () => {
    provider = await FakeProvider.start();
    worker = await startWorker(client, [SameCtxFlow]);
    const { runId } = await client.submit(SameCtxFlow, null);
    const run = await client.waitForRun(runId, { timeoutMs: 20_000 });
    expect(run.state).toBe('completed');
    const output = run.steps[0]?.output as { ids: string[] };
    const ids = output.ids;
    expect(ids).toHaveLength(N);
    expect(new Set(ids)).toEqual(new Set([provider.effects[0]?.id]));
    expect(provider.received).toHaveLength(1);
  });
});
