/**
 * Two requests with one key at once: an attempt whose request is still in flight at the API (it
 * timed out on our side, a zombie) and the next attempt re-sending the same key. The draft's API
 * answers 409, which snoozes the step without using an attempt until the first request is done;
 * an API that makes the second request wait (the Adyen profile) answers it with the first
 * outcome. Either way one effect. Real Workers on PostgreSQL, the fake over loopback.
 */
import { getLedgerEntry } from '@cyclone/idempotency';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { HttpKeyInUseError, type IdempotentFetchOptions, idempotentFetch } from '../src/index.js';
import { FakeHttpApi } from '../src/testing/index.js';
import { type FileHarness, fileHarness, oneNode, startWorker } from './support/harness.js';

let h: FileHarness;
let fake: FakeHttpApi | undefined;

beforeAll(async () => {
  h = await fileHarness();
});
afterAll(async () => {
  await h?.close();
});
afterEach(async () => {
  await fake?.close();
  fake = undefined;
});

/** A step that posts a shipment, with a 600 ms timeout so that a held request outlives it. */
function shipStep(f: FakeHttpApi, options: IdempotentFetchOptions, seen: unknown[]) {
  return oneNode(
    async (ctx) => {
      try {
        const res = await idempotentFetch(ctx, options)(`${f.url}/v1/shipments`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ orderId: 'o-7' }),
        });
        return { status: res.status, id: ((await res.json()) as { id: string }).id };
      } catch (err) {
        seen.push(err);
        throw err;
      }
    },
    { timeout: 600 },
  );
}

describe('concurrent requests with one key', () => {
  it('409 while the first is in flight: the step snoozes (no attempt used), then re-sends and gets the first answer; one effect (fault: hold)', async () => {
    fake = await FakeHttpApi.start();
    const f = fake;
    const hold = f.inject({ kind: 'hold' });
    const seen: unknown[] = [];
    const wf = shipStep(f, {}, seen);
    const worker = await startWorker(h, [wf]);
    try {
      const { runId } = await h.client.submit(wf, {});
      // Attempt 1 times out while its request is held; attempt 2 re-sends the key: 409.
      await f.waitForRequest((r) => r.outcome === 'conflict', 15_000);
      hold.release();
      const run = await h.client.waitForRun(runId, { timeoutMs: 20_000 });
      const step = run.steps[0];
      expect(run.state, JSON.stringify(step?.errors)).toBe('completed');
      const key = `${runId}:ship`;
      expect(f.keyedRequests.map((r) => r.key)).toEqual([key, key, key]);
      expect(f.keyedRequests.map((r) => r.outcome)).toEqual(['executed', 'conflict', 'replayed']);
      expect(f.count()).toBe(1);
      expect(step?.output).toEqual({ status: 201, id: 'shipment_1' });
      // The 409 was a snooze: attempts used are the timed-out one and the last one.
      expect(step?.snoozes).toBeGreaterThanOrEqual(1);
      expect((step?.attempt ?? 0) - (step?.snoozes ?? 0)).toBe(2);
      expect(step?.errors).toHaveLength(1);
      const snooze = seen.find((e) => HttpKeyInUseError.isInstance(e)) as HttpKeyInUseError;
      expect(snooze).toMatchObject({ code: 'HTTP_KEY_IN_USE', status: 409, key });
      expect(snooze.delayMs).toBeGreaterThanOrEqual(2_000); // the backoff of the 2nd call
      expect(await getLedgerEntry(h.client, key)).toMatchObject({ phase: 'succeeded' });
    } finally {
      await worker.stop();
    }
  });

  it('an API that makes the second request wait (Adyen profile): the re-send waits for the first and gets its answer; one effect (fault: hold)', async () => {
    fake = await FakeHttpApi.start({ profile: 'adyen' });
    const f = fake;
    const hold = f.inject({ kind: 'hold' });
    const wf = shipStep(f, { preset: 'adyen', quietPeriodMs: 200, timeoutMs: 5_000 }, []);
    const worker = await startWorker(h, [wf]);
    try {
      const { runId } = await h.client.submit(wf, {});
      await f.waitForRequest((r) => r.seq === 2, 15_000);
      hold.release();
      const run = await h.client.waitForRun(runId, { timeoutMs: 20_000 });
      expect(run.state, JSON.stringify(run.steps[0]?.errors)).toBe('completed');
      expect(f.keyedRequests.map((r) => r.outcome)).toEqual(['executed', 'replayed']);
      expect(f.count()).toBe(1);
      expect(f.keyedRequests[0]?.headers['idempotency-key']).toBe(`${runId}:ship`);
    } finally {
      await worker.stop();
    }
  });

  it('two guarded calls of one handler at once get one key each (call order), both sent once', async () => {
    fake = await FakeHttpApi.start();
    const f = fake;
    const wf = oneNode(async (ctx) => {
      const fetchOnce = idempotentFetch(ctx, { scope: 'parcel' });
      const post = (n: number) =>
        fetchOnce(`${f.url}/v1/shipments`, { method: 'POST', body: JSON.stringify({ n }) });
      const [a, b] = await Promise.all([post(1), post(2)]);
      return [a.status, b.status];
    });
    const worker = await startWorker(h, [wf]);
    try {
      const { runId } = await h.client.submit(wf, {});
      const run = await h.client.waitForRun(runId, { timeoutMs: 15_000 });
      expect(run.state).toBe('completed');
      expect(f.keyedRequests.map((r) => r.key).sort()).toEqual([
        `${runId}:ship:parcel`,
        `${runId}:ship:parcel:call2`,
      ]);
      expect(f.keyedRequests.find((r) => r.key === `${runId}:ship:parcel`)?.rawBody).toBe(
        '{"n":1}',
      );
      expect(f.count()).toBe(2);
    } finally {
      await worker.stop();
    }
  });
});
