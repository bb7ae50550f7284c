/**
 * The same key with another request is a determinism bug in the handler, never a second
 * effect: caught by the ledger before any request when the handler's request changed between
 * attempts, and from the API's 422 (the IETF draft's answer) when the key met another body
 * there. Both discard the step (non-retryable). Real Workers on PostgreSQL, the fake API.
 */
import { getLedgerEntry, IdempotencyMismatchError } from '@cyclone/idempotency';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { HttpResponseError, idempotentFetch } from '../src/index.js';
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

describe('the same key with another request', () => {
  it('the body changed between attempts: the ledger refuses it before any request (fault: reset after the effect)', async () => {
    fake.inject({ kind: 'reset', commit: true });
    const seen: unknown[] = [];
    const wf = oneNode(async (ctx) => {
      try {
        // A handler that is not deterministic: its body depends on the attempt.
        const res = await idempotentFetch(ctx)(`${fake.url}/v1/shipments`, {
          method: 'POST',
          body: JSON.stringify({ orderId: 'o-1', attempt: ctx.attempt }),
        });
        return res.status;
      } catch (err) {
        seen.push(err);
        throw err;
      }
    });
    const { run, step, runId } = await runOnce(h, wf, {});
    expect(run.state).toBe('failed');
    expect(step.attempt).toBe(2);
    expect(step.errors.at(-1)?.kind).toBe('non_retryable');
    expect(step.errors.at(-1)?.message).toMatch(/was used with a different request/);
    const err = seen.at(-1) as IdempotencyMismatchError;
    expect(IdempotencyMismatchError.isInstance(err)).toBe(true);
    expect(err.storedHash).toBeDefined();
    expect(fake.keyedRequests).toHaveLength(1);
    expect(fake.count()).toBe(1);
    expect(await getLedgerEntry(h.client, `${runId}:ship`)).toMatchObject({ phase: 'unknown' });
  });

  it('the API saw the key with another body: its 422 is a non-retryable determinism error, recorded; no second effect', async () => {
    const seen: unknown[] = [];
    const wf = oneNode(async (ctx) => {
      // Someone sent this key before, outside the ledger, with another body.
      await fetch(`${fake.url}/v1/shipments`, {
        method: 'POST',
        headers: { 'idempotency-key': `${ctx.runId}:ship` },
        body: JSON.stringify({ orderId: 'other' }),
      });
      try {
        return (
          await idempotentFetch(ctx)(`${fake.url}/v1/shipments`, {
            method: 'POST',
            body: JSON.stringify({ orderId: 'o-1' }),
          })
        ).status;
      } catch (err) {
        seen.push(err);
        throw err;
      }
    });
    const { run, step, runId } = await runOnce(h, wf, {});
    expect(run.state).toBe('failed');
    expect(step.attempt).toBe(1);
    expect(step.errors[0]?.message).toMatch(/the provider rejected the key: HTTP 422/);
    const err = seen[0] as IdempotencyMismatchError;
    expect(IdempotencyMismatchError.isInstance(err)).toBe(true);
    expect(HttpResponseError.isInstance(err.cause)).toBe(true);
    expect((err.cause as HttpResponseError).status).toBe(422);
    expect(fake.keyedRequests.map((r) => r.outcome)).toEqual(['executed', 'mismatch']);
    expect(fake.count()).toBe(1);
    expect(await getLedgerEntry(h.client, `${runId}:ship`)).toMatchObject({
      phase: 'failed',
      error: { outcome: 'determinism', status: 422 },
    });
  });
});
