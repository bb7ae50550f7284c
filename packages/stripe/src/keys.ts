/**
 * Scopes of the calls one handler makes, the caller's own keys, and the metadata marker that
 * lets a lost object be found by listing. The ledger key of a call is
 * `${runId}:${node}[:${scope}]` (`@cyclone/idempotency`); the Stripe `Idempotency-Key` is that
 * key, plus `#g<n>` from the second generation on, bounded to Stripe's 255 characters
 * (`#h<sha256>` tail).
 */
import { createHash } from 'node:crypto';
import { boundKey, MAX_SCOPE_LENGTH } from '@cyclone/idempotency';

/** Longest idempotency key Stripe accepts, in characters. */
export const MAX_STRIPE_KEY_LENGTH = 255;

/** Longest metadata value Stripe accepts, in characters (https://docs.stripe.com/api/metadata). */
export const MAX_METADATA_VALUE_LENGTH = 500;

/** Most metadata keys an object can hold. */
export const MAX_METADATA_KEYS = 50;

/**
 * Metadata keys the adapter adds to objects that take metadata, to find them after a lost answer.
 */
export const METADATA_KEYS = {
  /** The `Idempotency-Key` the object was created with (generation suffix included). */
  key: 'cyclone_key',
  runId: 'cyclone_run_id',
  node: 'cyclone_node',
} as const;

/**
 * The scope of the n-th (1-based) mutating call through wrappers of one scope in one handler
 * attempt: for an unscoped wrapper none for the first call (key `${runId}:${node}`), then
 * `call2`, `call3`, …; for a wrapper with `scope`, `scope`, then `${scope}:call2`, … Call order
 * must therefore be the same on every attempt (it is for straight-line handler code).
 */
export function callScope(scope: string | undefined, n: number): string | undefined {
  if (n <= 1) return scope;
  return scope === undefined ? `call${n}` : `${scope}:call${n}`;
}

const SCOPE_CHARS = /^[\x21\x22\x24-\x7e]+$/;

/**
 * The ledger scope of a call for which the caller passed its own `idempotencyKey`: `key:` and
 * the key itself when it is a valid scope (visible ASCII without `#`, short enough), else `key:`
 * and its SHA-256 hex. Stable for a stable caller key.
 */
export function callerKeyScope(callerKey: string): string {
  const scope = `key:${callerKey}`;
  if (scope.length <= MAX_SCOPE_LENGTH && SCOPE_CHARS.test(scope)) return scope;
  return `key:${createHash('sha256').update(callerKey, 'utf8').digest('hex')}`;
}

/**
 * The `Idempotency-Key` for a caller's own key: the key, plus `#g<n>` from generation 1 on,
 * bounded to 255 characters.
 */
export function callerStripeKey(callerKey: string, generation: number): string {
  const k = generation > 0 ? `${callerKey}#g${generation}` : callerKey;
  return boundKey(k, MAX_STRIPE_KEY_LENGTH);
}

/** The marker metadata of one call (values bounded to 500 characters). */
export function markerMetadata(
  stripeKey: string,
  runId: string,
  node: string,
): Record<string, string> {
  const b = (v: string) => boundKey(v, MAX_METADATA_VALUE_LENGTH);
  return {
    [METADATA_KEYS.key]: b(stripeKey),
    [METADATA_KEYS.runId]: b(runId),
    [METADATA_KEYS.node]: b(node),
  };
}
