/**
 * "Come back later" is a snooze, not an attempt: a 429 (with or without Retry-After) and a 503
 * with Retry-After are recorded as not sent, and the step waits for the time named (else the
 * rate-limit backoff), then sends again with the same key. A 503 without Retry-After stays an
 * unknown outcome. Real Workers on PostgreSQL, the fake API; each test names its fault.
 */
import { getLedgerEntry, RateLimitedError } from '@cyclone/idempotency';
import { expectNoAttemptUsed } from '@cyclone/testkit-engine';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { idempotentFetch } from '../src/index.js';
import { FakeHttpApi } from '../src/testing/index.js';
import { type FileHarness, fileHarness, oneNode, runOnce } from './support/harness.js';

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

function shipStep(seen: unknown[] = []) {
  return oneNode(async (ctx) => {
    try {
      return (
        await idempotentFetch(ctx)(`${fake.url}/v1/shipments`, { method: 'POST', body: '{}' })
      ).status;
    } catch (err) {
      seen.push(err);
      throw err;
    }
  });
}

const gap = (i: number) =>
  (fake.keyedRequests[i + 1]?.at.getTime() ?? 0) - (fake.keyedRequests[i]?.at.getTime() ?? 0);

describe('Retry-After', () => {
  it('429 + Retry-After: 2 → not sent, the next POST ≥ 2 s later with the same key, no attempt used (fault: 429)', async () => {
    fake.inject({ kind: 'status', status: 429, headers: { 'retry-after': '2' } });
    const seen: unknown[] = [];
    const { run, step, runId } = await runOnce(h, shipStep(seen), {});
    expect(run.state, JSON.stringify(step.errors)).toBe('completed');
    expectNoAttemptUsed(step, { maxAttempts: 5, used: 1 });
    const key = `${runId}:ship`;
    expect(fake.keyedRequests.map((r) => r.key)).toEqual([key, key]);
    expect(gap(0)).toBeGreaterThanOrEqual(2_000);
    expect(fake.count()).toBe(1);
    const err = seen[0] as RateLimitedError;
    expect(RateLimitedError.isInstance(err)).toBe(true);
    expect(err).toMatchObject({ delayMs: 2_000, retryAfterMs: 2_000 });
    expect(await getLedgerEntry(h.client, key)).toMatchObject({
      phase: 'succeeded',
      calls: 2,
      error: { outcome: 'not_sent', status: 429 },
    });
  });

  it('503 + Retry-After (an HTTP-date 1–2 s ahead) → a snooze too, no attempt used (fault: 503)', async () => {
    fake.inject({
      kind: 'status',
      status: 503,
      headers: { 'retry-after': new Date(Date.now() + 2_000).toUTCString() },
    });
    const { run, step } = await runOnce(h, shipStep(), {});
    expect(run.state, JSON.stringify(step.errors)).toBe('completed');
    expectNoAttemptUsed(step, { maxAttempts: 5, used: 1 });
    expect(gap(0)).toBeGreaterThanOrEqual(900);
    expect(fake.count()).toBe(1);
  });

  it('503 without Retry-After → an unknown outcome: an attempt used, then the same key again (fault: 503)', async () => {
    fake.inject({ kind: 'status', status: 503 });
    const { run, step, runId } = await runOnce(h, shipStep(), {});
    expect(run.state, JSON.stringify(step.errors)).toBe('completed');
    expect(step.attempt).toBe(2);
    expect(step.snoozes).toBe(0);
    expect(step.errors[0]?.message).toMatch(/may or may not have taken effect \(HTTP 503/);
    expect(fake.keyedRequests.map((r) => r.key)).toEqual([`${runId}:ship`, `${runId}:ship`]);
    expect(fake.count()).toBe(1);
  });

  it('a bare 429 → the rate-limit backoff (1 s and more), no attempt used (fault: 429)', async () => {
    fake.inject({ kind: 'status', status: 429 });
    const { run, step } = await runOnce(h, shipStep(), {});
    expect(run.state).toBe('completed');
    expectNoAttemptUsed(step, { maxAttempts: 5, used: 1 });
    expect(gap(0)).toBeGreaterThanOrEqual(1_000);
  });
});
