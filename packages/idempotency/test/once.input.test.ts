/**
 * Issue test 8: bad input — an empty or malformed scope, a request that is not JSON, a key past
 * the provider's limit, bad options — gives a clear, typed, non-retryable error before anything
 * is written or called.
 */
import { randomUUID } from 'node:crypto';
import {
  Client,
  type Context,
  NonRetryableError,
  newAction,
  newWorkflow,
  type Worker,
} from '@cyclone/core';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import {
  boundKey,
  getLedgerEntry,
  IdempotencyKeyError,
  IdempotencyPayloadError,
  IdempotencyUsageError,
  idempotencyKey,
  listLedgerEntries,
  MIN_KEY_LIMIT,
  once,
  resolveKey,
} from '../src/index.js';
import { createTestDb, type TestDb } from './support/db.js';
import { startWorker, stepErrors } from './support/harness.js';
import { FakeProvider, postEffect } from './support/provider.js';

/** A ctx for checks that fail before the database: any query would throw. */
function offlineCtx(): Context {
  const fail = () => {
    throw new Error('no database access expected');
  };
  return {
    runId: randomUUID(),
    node: 'send',
    attempt: 1,
    workflow: 'w',
    action: 'a',
    signal: new AbortController().signal,
    completionTx: fail,
    upstream: fail,
    log: console as never,
    client: { pool: { query: fail, connect: fail }, q: '"cyclone"' } as never,
    assertLease: fail,
  };
}

describe('keys', () => {
  const ctx = offlineCtx();

  it('are runId:node and runId:node:scope, never the attempt', () => {
    expect(idempotencyKey(ctx)).toBe(`${ctx.runId}:send`);
    expect(idempotencyKey(ctx, 'refund')).toBe(`${ctx.runId}:send:refund`);
    expect(idempotencyKey({ ...ctx, attempt: 7 } as Context, 'refund')).toBe(
      idempotencyKey(ctx, 'refund'),
    );
    expect(idempotencyKey(ctx, 'line:2/item-3')).toBe(`${ctx.runId}:send:line:2/item-3`);
  });

  it.each([
    ['', /must not be empty/],
    ['has space', /visible ASCII/],
    ['with#hash', /no '#'/],
    ['naïve', /visible ASCII/],
    ['x'.repeat(201), /201 characters, over the limit of 200/],
  ])('reject the scope %j', (scope, message) => {
    expect(() => idempotencyKey(ctx, scope)).toThrow(IdempotencyKeyError);
    expect(() => idempotencyKey(ctx, scope)).toThrow(message);
  });

  it('past a provider limit are bounded by a digest of the whole key, keeping them unique', () => {
    const step = { runId: ctx.runId, node: 'n'.repeat(63) }; // the longest node name
    const base = idempotencyKey(step, 'a'.repeat(200));
    expect(base).toHaveLength(301);
    const bounded = boundKey(base, 255);
    expect(bounded).toHaveLength(255);
    expect(bounded.startsWith(`${ctx.runId}:nnn`)).toBe(true);
    expect(bounded).toMatch(/#h[0-9a-f]{64}$/);
    expect(boundKey(base, 255)).toBe(bounded); // stable
    const other = idempotencyKey(step, `${'a'.repeat(199)}b`); // differs past the cut only
    expect(boundKey(other, 255)).not.toBe(bounded);
    expect(boundKey('short', 255)).toBe('short');
  });

  it('cannot be bounded below the digest size', () => {
    expect(() => boundKey('k'.repeat(100), MIN_KEY_LIMIT - 1)).toThrow(IdempotencyKeyError);
    expect(() => boundKey('k'.repeat(100), MIN_KEY_LIMIT - 1)).toThrow(/integer ≥ 67/);
    expect(boundKey('k'.repeat(100), MIN_KEY_LIMIT)).toHaveLength(MIN_KEY_LIMIT);
  });
});

describe('once() refuses bad input before touching the database or calling', () => {
  const ctx = offlineCtx();
  const fn = vi.fn(async () => 'never');

  it.each([
    [{ scope: '', request: 1 }, IdempotencyKeyError, /scope must not be empty/],
    [{ request: 10n }, IdempotencyPayloadError, /request .* BigInt .*/],
    [{ request: { to: ['a', () => 1] } }, IdempotencyPayloadError, /a function is not JSON/],
    [{ request: { at: new Map() } }, IdempotencyPayloadError, /Map object is not JSON/],
    [{ request: Number.NaN }, IdempotencyPayloadError, /NaN is not representable/],
    [{ request: undefined }, IdempotencyPayloadError, /options.request is required/],
    [{ request: 1, maxKeyLength: 40 }, IdempotencyKeyError, /integer ≥ 67/],
    [{ request: 1, onUnknown: 'sometimes' }, IdempotencyUsageError, /onUnknown must be/],
    [{ request: 1, quietPeriodMs: -1 }, IdempotencyUsageError, /quietPeriodMs/],
    [{ request: 1, provider: '' }, IdempotencyUsageError, /provider must be/],
  ])('%o', async (options, type, message) => {
    const p = once(ctx, options as never, fn);
    await expect(p).rejects.toBeInstanceOf(type);
    await expect(p).rejects.toThrow(message);
    await expect(p).rejects.toBeInstanceOf(NonRetryableError);
    expect(fn).not.toHaveBeenCalled();
  });

  it('names the path of what is not JSON, and a cycle', async () => {
    const cyclic: Record<string, unknown> = { a: 1 };
    cyclic.self = cyclic;
    await expect(once(ctx, { request: { list: [1, 2n] } }, fn)).rejects.toMatchObject({
      code: 'IDEMPOTENCY_PAYLOAD',
      what: 'request',
      path: '$.list[1]',
    });
    await expect(once(ctx, { request: cyclic }, fn)).rejects.toMatchObject({
      path: '$.self',
      message: expect.stringMatching(/circular reference/),
    });
  });

  it('resolveKey refuses a string that is not a key', async () => {
    await expect(
      resolveKey(ctx.client, 'not-a-key', { outcome: 'not_sent' }),
    ).rejects.toBeInstanceOf(IdempotencyUsageError);
  });
});

describe('in a running step', () => {
  let db: TestDb;
  let client: Client;
  let worker: Worker | undefined;
  let provider: FakeProvider;

  const act = newAction(
    'idem_input',
    async (ctx: Context, input: { mode: 'bigint' | 'long' }) => {
      if (input.mode === 'bigint') {
        return once(ctx, { request: { amount: 1n } }, (key) => postEffect(provider.url, key, {}));
      }
      return once(
        ctx,
        { scope: 's'.repeat(200), request: null, maxKeyLength: 100 },
        async (key, info) => ({ key, ledgerKey: info.ledgerKey }),
      );
    },
    { maxAttempts: 5, backoff: () => 20 },
  );
  const Flow = newWorkflow<{ mode: 'bigint' | 'long' }>('idem_input', {
    nodes: { step: { action: act } },
  });

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

  it('a request that is not JSON discards the step at once, with no row and no call', async () => {
    worker = await startWorker(client, [Flow]);
    const { runId } = await client.submit(Flow, { mode: 'bigint' });
    const run = await client.waitForRun(runId, { timeoutMs: 20_000 });
    expect(run.steps[0]).toMatchObject({ state: 'discarded', attempt: 1 });
    const [err] = await stepErrors(db.pool, runId, 'step');
    expect(err?.kind).toBe('non_retryable');
    expect(err?.message).toMatch(/the request of a guarded call cannot be stored as JSON/);
    expect(await listLedgerEntries(client, runId)).toEqual([]);
    expect(provider.received).toHaveLength(0);
  });

  it('a key past the provider limit reaches the call bounded; the ledger keeps the full key', async () => {
    worker = await startWorker(client, [Flow]);
    const { runId } = await client.submit(Flow, { mode: 'long' });
    const run = await client.waitForRun(runId, { timeoutMs: 20_000 });
    expect(run.state).toBe('completed');
    const full = `${runId}:step:${'s'.repeat(200)}`;
    const out = run.steps[0]?.output as { key: string; ledgerKey: string };
    expect(out.ledgerKey).toBe(full);
    expect(out.key).toBe(boundKey(full, 100));
    expect(out.key).toHaveLength(100);
    expect(await getLedgerEntry(client, full)).toMatchObject({ phase: 'succeeded' });
  });
});
