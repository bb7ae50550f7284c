/**
 * The pages' query retry policy: a server's answer (above all a 503 `query_timeout`) is not asked
 * again, so the error banner shows on the first failed attempt instead of after retries whose
 * back-off outlasts the polling interval; a failed connection is retried once.
 */
import { describe, expect, it } from 'vitest';
import { retryQuery } from '../web/src/retry.js';

const failure = (status: number, code: string) => Object.assign(new Error(code), { status, code });

describe('retryQuery', () => {
  it('does not retry a statement timeout or any other server answer', () => {
    expect(retryQuery(0, failure(503, 'query_timeout'))).toBe(false);
    expect(retryQuery(0, failure(503, 'unavailable'))).toBe(false);
    expect(retryQuery(0, failure(500, 'internal'))).toBe(false);
    expect(retryQuery(0, failure(404, 'run_not_found'))).toBe(false);
    expect(retryQuery(0, failure(401, 'unauthorized'))).toBe(false);
  });

  it('retries a failed connection once', () => {
    expect(retryQuery(0, failure(0, 'network'))).toBe(true);
    expect(retryQuery(1, failure(0, 'network'))).toBe(false);
    expect(retryQuery(0, new TypeError('fetch failed'))).toBe(true);
  });
});
