/** The outcome classification adapters reuse (PROVIDERS.md § 4.2 table). */
import { NonRetryableError } from '@cyclone/core';
import { describe, expect, it } from 'vitest';
import { classifyError, classifyHttpStatus, isOutcome, OutcomeError } from '../src/index.js';

const withCode = (code: string) => Object.assign(new Error(code), { code });

describe('classifyHttpStatus', () => {
  it.each([
    [429, 'not_sent'],
    [408, 'not_sent'],
    [409, 'conflict'],
    [400, 'definitive'],
    [402, 'definitive'],
    [404, 'definitive'],
    [500, 'ambiguous'],
    [503, 'ambiguous'],
  ])('%i → %s', (status, kind) => {
    expect(classifyHttpStatus(status)).toMatchObject({ kind, status });
  });
});

describe('classifyError', () => {
  it('honours an explicit outcome', () => {
    const err = new OutcomeError({ kind: 'determinism', reason: 'x' }, 'boom');
    expect(classifyError(err)).toEqual({ kind: 'determinism', reason: 'x' });
    expect(classifyError({ outcome: { kind: 'conflict' } })).toEqual({ kind: 'conflict' });
  });

  it('reads transport codes, also from fetch-style causes', () => {
    expect(classifyError(withCode('ECONNREFUSED')).kind).toBe('not_sent');
    expect(classifyError(withCode('ENOTFOUND')).kind).toBe('not_sent');
    expect(classifyError(withCode('ECONNRESET')).kind).toBe('ambiguous');
    expect(classifyError(withCode('ETIMEDOUT')).kind).toBe('ambiguous');
    const fetchFailed = new TypeError('fetch failed', { cause: withCode('ECONNREFUSED') });
    expect(classifyError(fetchFailed)).toMatchObject({ kind: 'not_sent', code: 'ECONNREFUSED' });
    const reset = new TypeError('fetch failed', { cause: withCode('UND_ERR_SOCKET') });
    expect(classifyError(reset).kind).toBe('ambiguous');
  });

  it('reads HTTP statuses in the usual places', () => {
    expect(classifyError({ status: 402 }).kind).toBe('definitive');
    expect(classifyError({ statusCode: 429 }).kind).toBe('not_sent');
    expect(classifyError({ response: { status: 502 } }).kind).toBe('ambiguous');
  });

  it('treats aborts as ambiguous, a NonRetryableError as definitive, anything else as ambiguous', () => {
    expect(classifyError(new DOMException('aborted', 'AbortError')).kind).toBe('ambiguous');
    expect(classifyError(new NonRetryableError('no')).kind).toBe('definitive');
    expect(classifyError(new Error('?')).kind).toBe('ambiguous');
    expect(classifyError('a string').kind).toBe('ambiguous');
    expect(classifyError(undefined).kind).toBe('ambiguous');
  });

  it('isOutcome checks the kind', () => {
    expect(isOutcome({ kind: 'not_sent' })).toBe(true);
    expect(isOutcome({ kind: 'maybe' })).toBe(false);
    expect(isOutcome(null)).toBe(false);
  });
});
