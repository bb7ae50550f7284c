/** The keys sent: fitted into short limits without losing uniqueness, quoted for the draft. */
import { boundKey, IdempotencyUsageError } from '@cyclone/idempotency';
import { describe, expect, it } from 'vitest';
import { callScope, fitKey, formatKey, MIN_HTTP_KEY_LIMIT } from '../src/keys.js';

const RUN = '7d0c1e2f-3a4b-4c5d-8e6f-708192a3b4c5';

describe('fitKey', () => {
  it('keeps a key within the limit, and every key without one', () => {
    expect(fitKey(`${RUN}:ship`, 64)).toBe(`${RUN}:ship`);
    expect(fitKey(`${RUN}:ship:${'x'.repeat(300)}`, undefined)).toHaveLength(
      RUN.length + ':ship:'.length + 300,
    );
  });

  it("uses the ledger's boundKey from 67 characters on (a readable prefix, #h and hex SHA-256)", () => {
    const key = `${RUN}:ship:${'s'.repeat(100)}`;
    expect(fitKey(key, 108)).toBe(boundKey(key, 108));
    expect(fitKey(key, 108)).toHaveLength(108);
  });

  it('below 67 (Adyen 64, Square 45): a shorter prefix, #h and the base64url SHA-256, distinct and stable', () => {
    const a = `${RUN}:ship:label-for-the-second-parcel`;
    const b = `${RUN}:ship:label-for-the-second-parcel:call2`;
    for (const limit of [64, 45]) {
      const fa = fitKey(a, limit);
      expect(fa).toHaveLength(limit);
      expect(fa).toMatch(/#h[A-Za-z0-9_-]{43}$/);
      expect(fitKey(a, limit)).toBe(fa);
      expect(fitKey(b, limit)).not.toBe(fa);
    }
    expect(fitKey(a, 64).startsWith(a.slice(0, 19))).toBe(true);
    expect(fitKey(a, 45).startsWith('#h')).toBe(true);
  });

  it(`refuses a limit under ${MIN_HTTP_KEY_LIMIT} (no room for a digest)`, () => {
    expect(() => fitKey(`${RUN}:ship`, 32)).toThrow(IdempotencyUsageError);
  });
});

describe('formatKey', () => {
  it('writes a token as is, and the draft\'s sf-string quoted with " and \\ escaped', () => {
    expect(formatKey('a:b', 'token')).toBe('a:b');
    expect(formatKey('a:b', 'sf-string')).toBe('"a:b"');
    expect(formatKey('a"b\\c', 'sf-string')).toBe('"a\\"b\\\\c"');
  });
});

describe('callScope', () => {
  it('numbers calls in call order, from the second on', () => {
    expect([1, 2, 3].map((n) => callScope(undefined, n))).toEqual([undefined, 'call2', 'call3']);
    expect([1, 2].map((n) => callScope('label', n))).toEqual(['label', 'label:call2']);
  });
});
