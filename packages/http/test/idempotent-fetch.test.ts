/**
 * `idempotentFetch` in real steps: real `@cyclone/core` Workers on PostgreSQL, the ledger of
 * `@cyclone/idempotency`, the platform's fetch, and the fake API over loopback. Each test names
 * the fault it injects.
 */
import { type Context, NonRetryableError } from '@cyclone/core';
import { getLedgerEntry, UnknownOutcomeError } from '@cyclone/idempotency';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { type IdempotentFetchOptions, idempotentFetch } from '../src/index.js';
import { FakeHttpApi } from '../src/testing/index.js';
import { type FileHarness, fileHarness, oneNode, runOnce, startWorker } from './support/harness.js';

let h: FileHarness;
let fake: FakeHttpApi;

beforeAll(async () => {
  h = await fileHarness();
});
afterAll(async () => {
  await h?.close();
});
beforeEach(async () => {
  fake = await FakeHttpApi.start();
});
afterEach(async () => {
  await fake.close();
});

const SHIPMENT = { orderId: 'o-1', to: 'Ada Lovelace', parcels: 1 };

/** `POST /v1/shipments` with a JSON body through idempotentFetch; resolves with the Response. */
function ship(ctx: Context, options: IdempotentFetchOptions = {}, body: unknown = SHIPMENT) {
  return idempotentFetch(ctx, options)(`${fake.url}/v1/shipments`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
}

const keysSent = () => fake.keyedRequests.map((r) => r.key);

describe('idempotentFetch', () => {
  it('sends the step key in Idempotency-Key and returns the Response; a later attempt gets the stored answer from the ledger and sends nothing', async () => {
    const seen: { status: number; replayed: string | null; body: unknown }[] = [];
    const wf = oneNode(async (ctx) => {
      const res = await ship(ctx);
      const body = (await res.json()) as { id: string };
      seen.push({ status: res.status, replayed: res.headers.get('cyclone-replayed'), body });
      // Fault (in the handler): attempt 1 fails after the call, so attempt 2 runs it again.
      if (ctx.attempt === 1) throw new Error('crash after the call');
      return { shipment: body.id };
    });
    const { run, step, runId } = await runOnce(h, wf, {});
    expect(run.state, JSON.stringify(step.errors)).toBe('completed');
    expect(step.attempt).toBe(2);
    expect(keysSent()).toEqual([`${runId}:ship`]);
    expect(fake.count()).toBe(1);
    expect(seen.map((s) => [s.status, s.replayed])).toEqual([
      [201, null],
      [201, 'ledger'],
    ]);
    expect(seen[1]?.body).toEqual(seen[0]?.body);
    expect(step.output).toEqual({ shipment: 'shipment_1' });
    expect(await getLedgerEntry(h.client, `${runId}:ship`)).toMatchObject({
      phase: 'succeeded',
      provider: 'http',
      providerRef: 'shipment_1',
      calls: 1,
    });
  });

  it('a dropped answer (fault: reset after the effect): the next attempt re-sends the same key and gets the first answer; one effect', async () => {
    fake.inject({ kind: 'reset', commit: true });
    const wf = oneNode(async (ctx) => {
      const res = await ship(ctx);
      return { status: res.status, id: ((await res.json()) as { id: string }).id };
    });
    const { run, step, runId } = await runOnce(h, wf, {});
    expect(run.state, JSON.stringify(step.errors)).toBe('completed');
    expect(step.attempt).toBe(2);
    expect(step.errors[0]?.message).toMatch(/may or may not have taken effect/);
    expect(keysSent()).toEqual([`${runId}:ship`, `${runId}:ship`]);
    expect(fake.keyedRequests.map((r) => r.outcome)).toEqual(['fault', 'replayed']);
    expect(fake.count()).toBe(1);
    expect(step.output).toEqual({ status: 201, id: 'shipment_1' });
    expect(await getLedgerEntry(h.client, `${runId}:ship`)).toMatchObject({
      phase: 'succeeded',
      calls: 2,
    });
  });

  it('keys follow call order and scopes, and stay the same on every attempt (fault: a 500 on the second call, once)', async () => {
    fake.inject({ kind: 'status', status: 500 }, { match: (r) => r.seq === 2 });
    const wf = oneNode(async (ctx) => {
      const fetchOnce = idempotentFetch(ctx);
      const post = (path: string, f = fetchOnce) =>
        f(`${fake.url}${path}`, { method: 'POST', body: '{}' }).then((r) => r.status);
      await post('/v1/shipments');
      await post('/v1/labels');
      await post('/v1/pickups', idempotentFetch(ctx, { scope: 'pickup' }));
      return null;
    });
    const { run, step, runId } = await runOnce(h, wf, {});
    expect(run.state, JSON.stringify(step.errors)).toBe('completed');
    expect(step.attempt).toBe(2);
    expect(keysSent()).toEqual([
      `${runId}:ship`,
      `${runId}:ship:call2`,
      `${runId}:ship:call2`,
      `${runId}:ship:pickup`,
    ]);
    expect(fake.count()).toBe(3);
  });

  it('a definitive 4xx discards the step (recorded failed); an operator retry sends generation #g1 and completes (fault: a stored 400)', async () => {
    fake.inject({ kind: 'status', status: 400, commit: true, body: { title: 'address invalid' } });
    const wf = oneNode(async (ctx) => (await ship(ctx)).status);
    const first = await runOnce(h, wf, {});
    expect(first.run.state).toBe('failed');
    expect(first.step.state).toBe('discarded');
    expect(first.step.errors.at(-1)?.message).toMatch(/failed definitively.*answered 400/);
    const key = `${first.runId}:ship`;
    expect(await getLedgerEntry(h.client, key)).toMatchObject({
      phase: 'failed',
      error: { outcome: 'definitive', status: 400 },
    });
    await h.client.retry(first.runId, 'ship');
    const worker = await startWorker(h, [wf]);
    try {
      const run = await h.client.waitForRun(first.runId, { timeoutMs: 15_000 });
      expect(run.state).toBe('completed');
      expect(run.steps[0]?.output).toBe(201);
    } finally {
      await worker.stop();
    }
    expect(keysSent()).toEqual([key, `${key}#g1`]);
  });

  it('an operator retry after the attempts ran out on unknown outcomes keeps the key (no new generation) and completes (fault: 500 twice)', async () => {
    fake.inject({ kind: 'status', status: 500 }, { times: 2 });
    const wf = oneNode(async (ctx) => (await ship(ctx)).status, { maxAttempts: 2 });
    const first = await runOnce(h, wf, {});
    expect(first.run.state).toBe('failed');
    expect(first.step.attempt).toBe(2);
    await h.client.retry(first.runId, 'ship');
    const worker = await startWorker(h, [wf]);
    try {
      const run = await h.client.waitForRun(first.runId, { timeoutMs: 15_000 });
      expect(run.state).toBe('completed');
    } finally {
      await worker.stop();
    }
    const key = `${first.runId}:ship`;
    expect(keysSent()).toEqual([key, key, key]);
    expect(fake.count()).toBe(1);
  });

  it('GET and other unguarded methods go to fetch untouched: no key, no ledger row', async () => {
    const wf = oneNode(async (ctx) => {
      const fetchOnce = idempotentFetch(ctx);
      const created = (await (await ship(ctx)).json()) as { id: string };
      const read = await fetchOnce(`${fake.url}/v1/shipments/${created.id}`);
      return { read: read.status, replayed: read.headers.get('cyclone-replayed') };
    });
    const { run, step, ledger } = await runOnce(h, wf, {});
    expect(run.state, JSON.stringify(step.errors)).toBe('completed');
    expect(step.output).toEqual({ read: 200, replayed: null });
    expect(
      fake.requests.find((r) => r.method === 'GET')?.headers['idempotency-key'],
    ).toBeUndefined();
    expect(ledger).toHaveLength(1);
  });

  it('bodies: URLSearchParams and bytes are sent as given, and replayed answers keep location and content type', async () => {
    const wf = oneNode(async (ctx) => {
      const fetchOnce = idempotentFetch(ctx);
      const form = await fetchOnce(`${fake.url}/v1/forms`, {
        method: 'POST',
        body: new URLSearchParams({ to: 'Ada', parcels: '2' }),
      });
      const bytes = await fetchOnce(`${fake.url}/v1/uploads`, {
        method: 'POST',
        headers: { 'content-type': 'application/octet-stream' },
        body: new Uint8Array([1, 2, 3]),
      });
      if (ctx.attempt === 1) throw new Error('again');
      return {
        form: form.headers.get('location'),
        type: form.headers.get('content-type'),
        bytes: bytes.status,
        replayed: bytes.headers.get('cyclone-replayed'),
      };
    });
    const { run, step } = await runOnce(h, wf, {});
    expect(run.state, JSON.stringify(step.errors)).toBe('completed');
    expect(step.output).toEqual({
      form: '/v1/forms/form_1',
      type: 'application/json',
      bytes: 201,
      replayed: 'ledger',
    });
    expect(fake.keyedRequests.map((r) => r.rawBody)).toEqual([
      'to=Ada&parcels=2',
      '\u0001\u0002\u0003',
    ]);
    expect(fake.count()).toBe(2);
  });

  it('a streamed body is refused before anything is written or sent (UnsupportedBodyError, non-retryable)', async () => {
    const wf = oneNode(async (ctx) => {
      await idempotentFetch(ctx)(`${fake.url}/v1/uploads`, {
        method: 'POST',
        body: new ReadableStream({ start: (c) => c.close() }),
        duplex: 'half',
      } as RequestInit);
      return null;
    });
    const { run, step, ledger } = await runOnce(h, wf, {});
    expect(run.state).toBe('failed');
    expect(step.attempt).toBe(1);
    expect(step.errors[0]).toMatchObject({ kind: 'non_retryable' });
    expect(step.errors[0]?.message).toMatch(/cannot guard a streamed body/);
    expect(fake.requests).toHaveLength(0);
    expect(ledger).toHaveLength(0);
  });

  it('a request that sets the key header itself is refused (the wrapper owns it)', async () => {
    const wf = oneNode(async (ctx) => {
      await idempotentFetch(ctx)(`${fake.url}/v1/shipments`, {
        method: 'POST',
        headers: { 'Idempotency-Key': 'mine' },
        body: '{}',
      });
      return null;
    });
    const { run, step } = await runOnce(h, wf, {});
    expect(run.state).toBe('failed');
    expect(step.errors[0]?.message).toMatch(/already has a Idempotency-Key header/);
    expect(fake.requests).toHaveLength(0);
  });

  it("onUnknown 'fail': a lost answer stops the step for an operator instead of re-sending (fault: reset after the effect)", async () => {
    fake.inject({ kind: 'reset', commit: true });
    const wf = oneNode(async (ctx) => (await ship(ctx, { onUnknown: 'fail' })).status);
    const { run, step, runId } = await runOnce(h, wf, {});
    expect(run.state).toBe('failed');
    expect(step.errors.at(-1)?.message).toMatch(/unknown outcome for idempotency key/);
    expect(fake.keyedRequests).toHaveLength(1);
    expect(await getLedgerEntry(h.client, `${runId}:ship`)).toMatchObject({ phase: 'unknown' });
  });

  it('past the key retention the API no longer deduplicates: the step stops for an operator (fault: reset after the effect; keyRetentionMs 1 s)', async () => {
    fake.inject({ kind: 'reset', commit: true });
    const seen: unknown[] = [];
    const wf = oneNode(
      async (ctx) => {
        try {
          return (await ship(ctx, { keyRetentionMs: 1_000, quietPeriodMs: 0 })).status;
        } catch (err) {
          seen.push(err);
          throw err;
        }
      },
      { backoff: () => 1_200 },
    );
    const { run } = await runOnce(h, wf, {});
    expect(run.state).toBe('failed');
    expect(UnknownOutcomeError.isInstance(seen.at(-1))).toBe(true);
    expect(String((seen.at(-1) as Error).message)).toMatch(
      /past the 1 s in which the API still replays/,
    );
    expect(fake.keyedRequests).toHaveLength(1);
  });

  it('a NonRetryableError the handler throws after the call keeps the answer stored', async () => {
    const wf = oneNode(async (ctx) => {
      await ship(ctx);
      throw new NonRetryableError('stop');
    });
    const { run, runId } = await runOnce(h, wf, {});
    expect(run.state).toBe('failed');
    expect(await getLedgerEntry(h.client, `${runId}:ship`)).toMatchObject({ phase: 'succeeded' });
  });
});
