/**
 * The shapes of flow control's options (docs/flow-control.md): concurrency limits, rate limits
 * and their keys, as `newAction` takes them and as it keeps them. Imports nothing, so the submit
 * path and the worker can read an action's limits without importing the definitions.
 */

/**
 * A limit's key, computed from the node's mapped (and validated) input when the step is due: a
 * non-empty string of at most `MAX_LIMIT_KEY_BYTES` (UTF-8), or null/undefined for "no key" (the
 * step then counts only against the action's limits without a key). Anything else, or a throw,
 * discards the step with a `limit_key_invalid` error. Must be pure: it may be computed more than
 * once.
 */
export type LimitKey<I> = (input: I) => string | null | undefined;

/** `ActionOptions.concurrency`: `limit` a positive integer. */
export interface ConcurrencyLimit<I> {
  limit: number;
  key?: LimitKey<I>;
}

/** `ActionOptions.rateLimit`: `limit` starts per `periodMs` (ms), both positive integers. */
export interface RateLimit<I> {
  limit: number;
  periodMs: number;
  key?: LimitKey<I>;
}

/** The longest limit key, in UTF-8 bytes. */
export const MAX_LIMIT_KEY_BYTES = 1024;

/** Largest `limit` and `periodMs`: PostgreSQL's int, 2³¹ − 1. */
export const MAX_LIMIT = 2 ** 31 - 1;

/**
 * An action's limits, normalised: at most one of each kind without a key and one with a key
 * (the one key of each kind a step stores: `StepInfo.concurrencyKey`, `rateLimitKey`).
 */
export interface ActionLimits {
  readonly concurrency: number | undefined;
  readonly keyedConcurrency:
    | { readonly limit: number; readonly key: LimitKey<unknown> }
    | undefined;
  readonly rate: { readonly limit: number; readonly periodMs: number } | undefined;
  readonly keyedRate:
    | { readonly limit: number; readonly periodMs: number; readonly key: LimitKey<unknown> }
    | undefined;
}
