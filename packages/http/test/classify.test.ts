/** What an answer means for the effect: the IETF draft's statuses and the presets' differences. */
import { describe, expect, it } from 'vitest';
import { type ClassifySemantics, classifyHttpError, DRAFT_SEMANTICS } from '../src/classify.js';
import { HttpResponseError } from '../src/errors.js';
import { presets } from '../src/presets.js';
import type { StoredResponse } from '../src/stored-response.js';

function answer(
  status: number,
  headers: Record<string, string> = {},
  body = '',
  sent: { recall?: boolean; call?: number } = {},
): HttpResponseError {
  const response: StoredResponse = {
    status,
    statusText: '',
    url: 'https://api.example.com/v1/shipments',
    headers: {},
    body,
    bodyEncoding: 'utf8',
  };
  return new HttpResponseError('POST', response, headers, {
    key: 'k',
    recall: sent.recall ?? false,
    call: sent.call ?? 1,
  });
}

const semantics = (name: keyof typeof presets): ClassifySemantics => {
  const p = presets[name];
  return {
    conflictStatuses: p.conflictStatuses ?? [409],
    mismatch: p.mismatch === undefined ? { statuses: [422] } : p.mismatch,
    storesErrors: p.storesErrors ?? false,
    retryAfterStatuses: p.retryAfterStatuses ?? [429, 503],
  };
};

describe('classifyHttpError, by the draft', () => {
  it.each([
    [409, 'conflict'],
    [422, 'determinism'],
    [400, 'definitive'],
    [401, 'definitive'],
    [404, 'definitive'],
    [408, 'not_sent'],
    [500, 'ambiguous'],
    [502, 'ambiguous'],
    [503, 'ambiguous'],
    [504, 'ambiguous'],
  ])('%i → %s', (status, kind) => {
    expect(classifyHttpError(answer(status), DRAFT_SEMANTICS).kind).toBe(kind);
  });

  it('429 and 503 with Retry-After are rate limits with the wait named; a bare 429 too, without one', () => {
    expect(classifyHttpError(answer(429, { 'retry-after': '2' }))).toMatchObject({
      kind: 'not_sent',
      rateLimited: true,
      retryAfterMs: 2_000,
    });
    expect(classifyHttpError(answer(503, { 'retry-after': '1' }))).toMatchObject({
      kind: 'not_sent',
      rateLimited: true,
      retryAfterMs: 1_000,
    });
    const bare = classifyHttpError(answer(429));
    expect(bare).toMatchObject({ kind: 'not_sent', rateLimited: true });
    expect(bare.retryAfterMs).toBeUndefined();
  });

  it('transport failures go to the default classifier: refused → not sent, reset or timeout → ambiguous', () => {
    const refused = Object.assign(new TypeError('fetch failed'), {
      cause: { code: 'ECONNREFUSED' },
    });
    const reset = Object.assign(new TypeError('fetch failed'), { cause: { code: 'ECONNRESET' } });
    const timeout = new DOMException('The operation was aborted due to timeout', 'TimeoutError');
    expect(classifyHttpError(refused).kind).toBe('not_sent');
    expect(classifyHttpError(reset).kind).toBe('ambiguous');
    expect(classifyHttpError(timeout).kind).toBe('ambiguous');
  });
});

describe('classifyHttpError, by preset', () => {
  it('APIs that name no in-flight status (PayPal, Adyen, Square, Easyship): a 409 is definitive', () => {
    for (const name of ['paypal', 'adyen', 'square', 'easyship'] as const) {
      expect(classifyHttpError(answer(409), semantics(name)).kind, name).toBe('definitive');
    }
  });

  it('Square: a 4xx that speaks of the idempotency key is a mismatch; other 400s stay definitive', () => {
    const s = semantics('square');
    const reused = JSON.stringify({
      errors: [{ code: 'IDEMPOTENCY_KEY_REUSED', detail: 'idempotency key used before' }],
    });
    expect(classifyHttpError(answer(400, {}, reused), s).kind).toBe('determinism');
    expect(classifyHttpError(answer(400, {}, '{"errors":[{"code":"BAD_REQUEST"}]}'), s).kind).toBe(
      'definitive',
    );
  });

  it('Easyship stores 5xx: a re-sent key that gets a 5xx got the stored answer (definitive); a 503 with Retry-After stays a 5xx', () => {
    const s = semantics('easyship');
    expect(classifyHttpError(answer(500, {}, '', { recall: false }), s).kind).toBe('ambiguous');
    expect(classifyHttpError(answer(500, {}, '', { recall: true }), s).kind).toBe('definitive');
    expect(classifyHttpError(answer(503, { 'retry-after': '1' }), s).kind).toBe('ambiguous');
  });

  it('the draft preset stores errors too; PayPal does not (a 5xx there may be retried)', () => {
    expect(classifyHttpError(answer(502, {}, '', { recall: true }), semantics('ietf')).kind).toBe(
      'definitive',
    );
    expect(classifyHttpError(answer(502, {}, '', { recall: true }), semantics('paypal')).kind).toBe(
      'ambiguous',
    );
  });
});
