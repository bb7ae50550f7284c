/**
 * The keys `idempotentFetch` sends: one ledger key per guarded call in call order
 * (`${runId}:${node}[:${scope}]`, then `…:call2`, …), fitted into the API's length limit, and
 * written as the API wants it (a bare token, or the IETF draft's Structured Field string).
 */
import { createHash } from 'node:crypto';
import { boundKey, IdempotencyUsageError, MIN_KEY_LIMIT } from '@cyclone/idempotency';

/**
 * The shortest key limit `idempotentFetch` accepts: 45 characters, room for `#h` and the
 * base64url SHA-256 of the key (43 characters). Square's CreatePayment takes 45.
 */
export const MIN_HTTP_KEY_LIMIT = 45;

/** Characters a short-limit digest spends: `#h` and 43 base64url characters of SHA-256. */
const SHORT_DIGEST_LENGTH = 45;

/**
 * Fits a key into the API's limit without losing uniqueness: a key within it as is; past it,
 * with a limit ≥ 67, `@cyclone/idempotency`'s `boundKey` (a readable prefix, `#h` and the hex
 * SHA-256 of the whole key); with a shorter limit, a shorter prefix, `#h` and the base64url
 * SHA-256 (43 characters). The same key always maps to the same sent key; a fitted key never
 * equals an unfitted one (ledger keys never contain `#h`).
 * @throws IdempotencyUsageError for a limit under `MIN_HTTP_KEY_LIMIT`.
 */
export function fitKey(key: string, maxLength: number | undefined): string {
  if (maxLength === undefined || key.length <= maxLength) return key;
  if (maxLength >= MIN_KEY_LIMIT) return boundKey(key, maxLength);
  checkKeyLimit(maxLength);
  const digest = createHash('sha256').update(key).digest('base64url');
  return `${key.slice(0, maxLength - SHORT_DIGEST_LENGTH)}#h${digest}`;
}

/** @throws IdempotencyUsageError unless `maxLength` is an integer ≥ `MIN_HTTP_KEY_LIMIT`. */
export function checkKeyLimit(maxLength: number): void {
  if (!Number.isInteger(maxLength) || maxLength < MIN_HTTP_KEY_LIMIT) {
    throw new IdempotencyUsageError(
      `maxKeyLength must be an integer ≥ ${MIN_HTTP_KEY_LIMIT} (room for a digest of the key), got ${maxLength}`,
    );
  }
}

/** How a key is written into its header: a bare token, or an RFC 8941 `sf-string`. */
export type KeyFormat = 'token' | 'sf-string';

/**
 * A key as its header value: itself, or quoted as an RFC 8941 String (the IETF draft's syntax:
 * `"…"`, with `"` and `\` escaped). Keys are visible ASCII, so no other escape is needed.
 */
export function formatKey(key: string, format: KeyFormat): string {
  return format === 'sf-string' ? `"${key.replace(/[\\"]/g, (c) => `\\${c}`)}"` : key;
}

/**
 * The scope of the n-th (1-based) guarded call of one scope in one handler attempt: none for the
 * first unscoped call (key `${runId}:${node}`), then `call2`, `call3`, …; with `scope`: `scope`,
 * then `${scope}:call2`, … Call order must therefore be the same on every attempt.
 */
export function callScope(scope: string | undefined, n: number): string | undefined {
  if (n <= 1) return scope;
  return scope === undefined ? `call${n}` : `${scope}:call${n}`;
}
