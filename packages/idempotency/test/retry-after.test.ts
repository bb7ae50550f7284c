/**
 * The rate-limit header helpers every adapter uses: `Retry-After` (seconds or HTTP-date), the
 * reset headers, the header shapes the SDKs hand out, and the backoff when no time is named.
 */
import { MAX_DELAY_MS } from '@cyclone/core';
import { describe, expect, it } from 'vitest';
import {
  classifyError,
  classifyHttpStatus,
  headerValue,
  parseRateLimitReset,
  parseRetryAfter,
  RATE_LIMIT_BACKOFF_CAP_MS,
  rateLimitBackoffMs,
  retryAfterMs,
} from '../src/index.js';

const NOW = Date.parse('2026-12-01T10:00:00Z');

describe('parseRetryAfter', () => {
  it('delay-seconds', () => {
    expect(parseRetryAfter('2', NOW)).toBe(2_000);
    expect(parseRetryAfter(' 0 ', NOW)).toBe(0);
    expect(parseRetryAfter('120', NOW)).toBe(120_000);
    expect(parseRetryAfter('1.5', NOW)).toBe(1_500); // not RFC 9110, but unambiguous
  });

  it('an HTTP-date, in each of its three forms, is the time until it', () => {
    expect(parseRetryAfter('Tue, 01 Dec 2026 10:00:05 GMT', NOW)).toBe(5_000);
    expect(parseRetryAfter('Tuesday, 01-Dec-26 10:00:30 GMT', NOW)).toBe(30_000);
    // asctime has no zone: GMT, whatever the process's time zone
    expect(parseRetryAfter('Tue Dec  1 10:01:00 2026', NOW)).toBe(60_000);
  });

  it('an HTTP-date already past is 0', () => {
    expect(parseRetryAfter('Tue, 01 Dec 2026 09:59:00 GMT', NOW)).toBe(0);
  });

  it('garbage is undefined (never a guess)', () => {
    for (const v of [
      '',
      '   ',
      'soon',
      '2 seconds',
      '2s',
      'hello 2020', // Date.parse takes it for 2020-01-01
      'Mon 2', // Date.parse takes it for a date in 2001
      '1e3',
      'Tue, 01 Dec 2026 10:00:05', // an IMF-fixdate needs its GMT
      'NaN',
      'Infinity',
    ]) {
      expect(parseRetryAfter(v, NOW), JSON.stringify(v)).toBeUndefined();
    }
    expect(parseRetryAfter(undefined, NOW)).toBeUndefined();
  });

  it('a negative number is undefined (delay-seconds are digits only)', () => {
    expect(parseRetryAfter('-5', NOW)).toBeUndefined();
    expect(parseRetryAfter('-0', NOW)).toBeUndefined();
  });

  it('a huge delay is capped by MAX_DELAY_MS (the longest snooze)', () => {
    expect(parseRetryAfter('99999999999999', NOW)).toBe(MAX_DELAY_MS);
    expect(parseRetryAfter(String(MAX_DELAY_MS / 1000 + 1), NOW)).toBe(MAX_DELAY_MS);
    expect(parseRetryAfter('Fri, 01 Dec 2090 10:00:00 GMT', NOW)).toBe(MAX_DELAY_MS);
  });
});

describe('parseRateLimitReset', () => {
  it("a Unix time in seconds (SendGrid's X-RateLimit-Reset) or in ms is the time until it", () => {
    expect(parseRateLimitReset(String(NOW / 1000 + 3), NOW)).toBe(3_000);
    expect(parseRateLimitReset(String(NOW + 1_500), NOW)).toBe(1_500);
    expect(parseRateLimitReset(String(NOW / 1000 - 10), NOW)).toBe(0);
  });

  it('a small number is seconds from now; garbage, negatives are undefined; huge is capped', () => {
    expect(parseRateLimitReset('7', NOW)).toBe(7_000);
    expect(parseRateLimitReset('-7', NOW)).toBeUndefined();
    expect(parseRateLimitReset('soon', NOW)).toBeUndefined();
    expect(parseRateLimitReset(String(NOW / 1000 + 400 * 86_400 * 366), NOW)).toBe(MAX_DELAY_MS);
  });
});

describe('retryAfterMs and headerValue', () => {
  it('prefers Retry-After, then RateLimit-Reset, then X-RateLimit-Reset', () => {
    const reset = String(NOW / 1000 + 9);
    expect(retryAfterMs({ 'retry-after': '2', 'x-ratelimit-reset': reset }, NOW)).toBe(2_000);
    expect(retryAfterMs({ 'ratelimit-reset': '4', 'x-ratelimit-reset': reset }, NOW)).toBe(4_000);
    expect(retryAfterMs({ 'x-ratelimit-reset': reset }, NOW)).toBe(9_000);
    // A garbage Retry-After does not hide a usable reset header.
    expect(retryAfterMs({ 'retry-after': 'soon', 'x-ratelimit-reset': reset }, NOW)).toBe(9_000);
    expect(retryAfterMs({ 'content-type': 'application/json' }, NOW)).toBeUndefined();
    expect(retryAfterMs(undefined, NOW)).toBeUndefined();
    expect(retryAfterMs(null, NOW)).toBeUndefined();
  });

  it('reads every header shape the SDKs hand out, names in any case', () => {
    expect(retryAfterMs(new Headers({ 'Retry-After': '3' }), NOW)).toBe(3_000);
    expect(retryAfterMs({ 'Retry-After': '3' }, NOW)).toBe(3_000);
    expect(retryAfterMs({ 'retry-after': ['3', '8'] }, NOW)).toBe(3_000);
    expect(retryAfterMs({ 'retry-after': 3 }, NOW)).toBe(3_000);
    // axios' AxiosHeaders: an object with a case-insensitive get
    const axiosLike = Object.assign(
      Object.create({ get: (n: string) => (n === 'retry-after' ? '5' : undefined) }),
      {},
    );
    expect(retryAfterMs(axiosLike, NOW)).toBe(5_000);
    expect(headerValue({ 'X-RateLimit-Reset': '1' }, 'x-ratelimit-reset')).toBe('1');
  });
});

describe('rateLimitBackoffMs (a rate-limit answer that names no time)', () => {
  it('1 s, doubling per call under the key, capped at 60 s, plus up to 25 % jitter', () => {
    for (const [call, base] of [
      [1, 1_000],
      [2, 2_000],
      [3, 4_000],
      [7, 60_000],
      [100, 60_000],
    ] as const) {
      for (let i = 0; i < 20; i++) {
        const ms = rateLimitBackoffMs(call);
        expect(ms).toBeGreaterThanOrEqual(base);
        expect(ms).toBeLessThanOrEqual(base * 1.25);
      }
    }
    expect(rateLimitBackoffMs(0)).toBeLessThanOrEqual(1_250);
    expect(rateLimitBackoffMs(Number.NaN)).toBeLessThanOrEqual(1_250);
    expect(RATE_LIMIT_BACKOFF_CAP_MS).toBe(60_000);
  });
});

describe('a 429 is classified as rate-limited, with the wait its headers name', () => {
  it('classifyHttpStatus', () => {
    expect(classifyHttpStatus(429, { 'retry-after': '2' })).toEqual({
      kind: 'not_sent',
      status: 429,
      reason: 'HTTP 429',
      rateLimited: true,
      retryAfterMs: 2_000,
    });
    expect(classifyHttpStatus(429)).toEqual({
      kind: 'not_sent',
      status: 429,
      reason: 'HTTP 429',
      rateLimited: true,
    });
    // 503 stays ambiguous, Retry-After or not: it may have been executed.
    expect(classifyHttpStatus(503, { 'retry-after': '2' })).toEqual({
      kind: 'ambiguous',
      status: 503,
      reason: 'HTTP 503',
    });
    expect(classifyHttpStatus(408).rateLimited).toBeUndefined();
  });

  it('classifyError reads the headers of the error or of its response', () => {
    expect(classifyError({ status: 429, headers: { 'retry-after': '1' } })).toMatchObject({
      rateLimited: true,
      retryAfterMs: 1_000,
    });
    expect(
      classifyError({ response: { status: 429, headers: new Headers({ 'Retry-After': '4' }) } }),
    ).toMatchObject({ rateLimited: true, retryAfterMs: 4_000 });
  });
});
