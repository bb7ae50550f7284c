/**
 * The presets against the fake's matching profiles, in real steps: where the key goes (a header,
 * quoted for the draft, or Square's body field), how long it may be, and what each API does with
 * a lost answer or a 5xx. Real Workers on PostgreSQL; each test names its fault.
 */
import { getLedgerEntry } from '@cyclone/idempotency';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { fitKey, idempotentFetch, type PresetName } from '../src/index.js';
import { FakeHttpApi } from '../src/testing/index.js';
import { type FileHarness, fileHarness, oneNode, runOnce } from './support/harness.js';

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

async function start(profile: PresetName) {
  fake = await FakeHttpApi.start({ profile });
  return fake;
}

/** A step posting `body` through the preset; quick quiet periods for the tests. */
function payStep(f: FakeHttpApi, preset: PresetName, scope?: string) {
  return oneNode(async (ctx) => {
    const res = await idempotentFetch(ctx, {
      preset,
      ...(scope ? { scope } : {}),
      timeoutMs: 2_000,
      quietPeriodMs: 100,
    })(`${f.url}/v2/payments`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ amount_money: { amount: 100, currency: 'USD' }, source_id: 'cnon' }),
    });
    return { status: res.status, body: await res.json() };
  });
}

describe('presets', () => {
  it('square: the key goes in the body field idempotency_key (≤ 45 characters), no header; a dropped answer → re-sent with the same key, one effect (fault: reset after the effect)', async () => {
    const f = await start('square');
    f.inject({ kind: 'reset', commit: true });
    const { run, step, runId } = await runOnce(h, payStep(f, 'square', 'payment'), {});
    expect(run.state, JSON.stringify(step.errors)).toBe('completed');
    const [first, second] = f.keyedRequests;
    expect(first?.key).toHaveLength(45);
    expect(first?.key).toMatch(/^#h[A-Za-z0-9_-]{43}$/);
    expect(second?.key).toBe(first?.key);
    expect(first?.headers['idempotency-key']).toBeUndefined();
    expect(JSON.parse(first?.rawBody ?? '{}')).toMatchObject({
      idempotency_key: first?.key,
      source_id: 'cnon',
    });
    expect(f.keyedRequests.map((r) => r.outcome)).toEqual(['fault', 'replayed']);
    expect(f.count()).toBe(1);
    expect(step.output).toMatchObject({ status: 201, body: { id: 'payment_1' } });
    expect(await getLedgerEntry(h.client, `${runId}:ship:payment`)).toMatchObject({
      phase: 'succeeded',
      provider: 'square',
    });
  });

  it('square: the key with another body → its 400 about the key is a determinism error', async () => {
    const f = await start('square');
    const wf = oneNode(async (ctx) => {
      // The same key as the wrapper's, sent before with another body.
      await fetch(`${f.url}/v2/payments`, {
        method: 'POST',
        body: JSON.stringify({ amount: 1, idempotency_key: fitKey(`${ctx.runId}:ship`, 45) }),
      });
      return (
        await idempotentFetch(ctx, { preset: 'square' })(`${f.url}/v2/payments`, {
          method: 'POST',
          body: JSON.stringify({ amount: 2 }),
        })
      ).status;
    });
    const { run, step } = await runOnce(h, wf, {});
    expect(run.state).toBe('failed');
    expect(step.errors[0]?.message).toMatch(/the provider rejected the key: HTTP 400/);
    expect(f.count()).toBe(1);
  });

  it('ietf: the key is a quoted sf-string; a committed 500 is the stored answer of a re-sent key → definitive, the step stops (fault: 500 after the effect)', async () => {
    const f = await start('ietf');
    f.inject({ kind: 'status', status: 500, commit: true });
    const { run, step, runId } = await runOnce(h, payStep(f, 'ietf'), {});
    expect(run.state).toBe('failed');
    expect(f.keyedRequests.map((r) => r.rawKey)).toEqual([`"${runId}:ship"`, `"${runId}:ship"`]);
    expect(f.keyedRequests.map((r) => r.status)).toEqual([500, 500]);
    expect(step.errors.map((e) => e.kind)).toEqual(['error', 'non_retryable']);
    expect(step.errors[1]?.message).toMatch(/failed definitively: .* answered 500/);
    expect(await getLedgerEntry(h.client, `${runId}:ship`)).toMatchObject({
      phase: 'failed',
      error: {
        outcome: 'definitive',
        reason: expect.stringMatching(/replays the error it stored/),
      },
    });
    expect(f.count()).toBe(1);
  });

  it('paypal: PayPal-Request-Id; a committed 500 is not stored there, so the re-send gets what was done; one effect (fault: 500 after the effect)', async () => {
    const f = await start('paypal');
    f.inject({ kind: 'status', status: 500, commit: true });
    const { run, step, runId } = await runOnce(h, payStep(f, 'paypal'), {});
    expect(run.state, JSON.stringify(step.errors)).toBe('completed');
    expect(f.keyedRequests.map((r) => r.headers['paypal-request-id'])).toEqual([
      `${runId}:ship`,
      `${runId}:ship`,
    ]);
    expect(f.keyedRequests.map((r) => r.status)).toEqual([500, 201]);
    expect(f.count()).toBe(1);
  });

  it('adyen: a key over 64 characters is fitted (and accepted); the echoed key header is kept with the stored answer', async () => {
    const f = await start('adyen');
    const scope = 'authorise-the-payment-of-the-order';
    const wf = oneNode(async (ctx) => {
      const fetchOnce = idempotentFetch(ctx, { preset: 'adyen', scope });
      const res = await fetchOnce(`${f.url}/v71/payments`, { method: 'POST', body: '{}' });
      if (ctx.attempt === 1) throw new Error('again');
      return {
        echo: res.headers.get('idempotency-key'),
        replayed: res.headers.get('cyclone-replayed'),
      };
    });
    const { run, step, runId } = await runOnce(h, wf, {});
    expect(run.state, JSON.stringify(step.errors)).toBe('completed');
    const key = f.keyedRequests[0]?.key ?? '';
    expect(`${runId}:ship:${scope}`.length).toBeGreaterThan(64);
    expect(key).toHaveLength(64);
    expect(key.startsWith(runId.slice(0, 19))).toBe(true);
    expect(step.output).toEqual({ echo: key, replayed: 'ledger' });
    expect(f.keyedRequests).toHaveLength(1);
  });

  it('easyship: a 503 with Retry-After is not a wait there (it stores 5xx): an unknown outcome, then its stored answer → definitive (fault: 503 after the effect)', async () => {
    const f = await start('easyship');
    f.inject({ kind: 'status', status: 503, commit: true, headers: { 'retry-after': '1' } });
    const { run, step } = await runOnce(h, payStep(f, 'easyship'), {});
    expect(run.state).toBe('failed');
    expect(step.errors[0]?.message).toMatch(/may or may not have taken effect \(HTTP 503/);
    expect(f.keyedRequests.map((r) => r.status)).toEqual([503, 503]);
    expect(f.count()).toBe(1);
  });
});
