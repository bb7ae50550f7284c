/**
 * Idempotency keys: `${runId}:${node}` for the step, or
 * `${runId}:${node}:${scope}` for one of several external calls in a handler. Stable for the
 * life of the node — across retries, lease reclaims and operator retries — because it never
 * contains the attempt.
 */
import { createHash } from 'node:crypto';
import type { Context } from '@cyclone/core';
import { IdempotencyKeyError } from './errors.js';

/** Longest scope accepted, in characters (a key then stays ≤ 36 + 1 + 63 + 1 + 200 = 301). */
export const MAX_SCOPE_LENGTH = 200;

/**
 * A scope: 1–200 visible ASCII characters (`!` to `~`) except `#`. ASCII because keys travel in
 * HTTP headers; `#` because it marks the suffixes added after the key (`#g<n>` for a generation,
 * `#h<sha256>` for a bounded key), so no scope can forge either. `:` is allowed: the run id (a
 * uuid) and the node name (a plain identifier) never contain one, so a key still splits
 * unambiguously at its first two colons.
 */
const SCOPE = /^[\x21\x22\x24-\x7e]+$/;

/** Throws `IdempotencyKeyError` unless `scope` is a valid scope (see `SCOPE`). */
export function checkScope(scope: unknown): asserts scope is string {
  if (typeof scope !== 'string') {
    throw new IdempotencyKeyError(`scope must be a string, got ${typeof scope}`);
  }
  if (scope.length === 0) {
    throw new IdempotencyKeyError('scope must not be empty (omit it for the step key runId:node)');
  }
  if (scope.length > MAX_SCOPE_LENGTH) {
    throw new IdempotencyKeyError(
      `scope is ${scope.length} characters, over the limit of ${MAX_SCOPE_LENGTH}`,
    );
  }
  if (!SCOPE.test(scope)) {
    throw new IdempotencyKeyError(
      `scope ${JSON.stringify(scope.slice(0, 60))} may only contain visible ASCII characters (no spaces, no '#')`,
    );
  }
}

/**
 * The idempotency key of a step (`${runId}:${node}`) or of one external call of it
 * (`${runId}:${node}:${scope}`). Pass it to the provider (Stripe's `Idempotency-Key`, a
 * `custom_args` marker) or to a unique column. Never contains the attempt, so it is the same on
 * every attempt and after an operator retry.
 * @param ctx the handler's context (only `runId` and `node` are read).
 * @param scope one per distinct external call of the handler; see `SCOPE` for what is allowed.
 * @throws IdempotencyKeyError for an empty, too long (> 200 characters) or badly formed scope.
 */
export function idempotencyKey(ctx: Pick<Context, 'runId' | 'node'>, scope?: string): string {
  if (typeof ctx?.runId !== 'string' || ctx.runId === '' || typeof ctx.node !== 'string') {
    throw new IdempotencyKeyError('idempotencyKey needs the handler ctx (runId and node)');
  }
  if (scope === undefined) return `${ctx.runId}:${ctx.node}`;
  checkScope(scope);
  return `${ctx.runId}:${ctx.node}:${scope}`;
}

/**
 * The key sent to a provider for a ledger generation: the key itself for generation 0, else
 * `${key}#g${generation}`. The generation is bumped only when an operator retries a step whose
 * call failed definitively, so that a provider which caches answers by key (Stripe) does not
 * replay its cached failure; an unknown outcome never changes the key.
 */
export function nativeKey(key: string, generation: number): string {
  return generation > 0 ? `${key}#g${generation}` : key;
}

/** Characters a bounded key spends on its digest: `#h` and 64 hex digits of SHA-256. */
export const BOUND_DIGEST_LENGTH = 66;

/** The smallest limit `boundKey` accepts: the digest plus one character of the original key. */
export const MIN_KEY_LIMIT = BOUND_DIGEST_LENGTH + 1;

/**
 * Fits a key into a provider's length limit (Stripe: 255 characters) without losing uniqueness:
 * a key within the limit is returned as is; a longer one keeps its first
 * `maxLength - 66` characters (so the run id stays readable) followed by `#h` and the SHA-256
 * (hex) of the WHOLE key. Distinct keys stay distinct (up to SHA-256 collisions), the same key
 * always maps to the same bounded key, and a bounded key can never equal an unbounded one
 * (keys from `idempotencyKey` never contain `#h`).
 * @param maxLength the provider's limit in characters (keys from `idempotencyKey` are ASCII, so
 *   characters are bytes).
 * @throws IdempotencyKeyError when `key` is not a non-empty string or `maxLength` is not an
 *   integer ≥ `MIN_KEY_LIMIT` (67).
 */
export function boundKey(key: string, maxLength: number): string {
  if (typeof key !== 'string' || key.length === 0) {
    throw new IdempotencyKeyError('boundKey needs a non-empty key');
  }
  if (!Number.isInteger(maxLength) || maxLength < MIN_KEY_LIMIT) {
    throw new IdempotencyKeyError(
      `a key limit must be an integer ≥ ${MIN_KEY_LIMIT} (room for a ${BOUND_DIGEST_LENGTH}-character digest), got ${maxLength}`,
    );
  }
  if (key.length <= maxLength) return key;
  let prefix = key.slice(0, maxLength - BOUND_DIGEST_LENGTH);
  // Never cut a surrogate pair in half.
  if (/[\uD800-\uDBFF]$/.test(prefix)) prefix = prefix.slice(0, -1);
  return `${prefix}#h${createHash('sha256').update(key).digest('hex')}`;
}
