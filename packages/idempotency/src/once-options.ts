/**
 * What `once` is given: its public option and callback types, their defaults, and their
 * validation into the normalised form the protocol runs on (`normalise`), plus the key a call
 * sends (`sendKey`).
 */
import { type Context, type Json, PayloadError } from '@cyclone/core';
import { hashJson, toJson } from '@cyclone/core/internal';
import { IdempotencyPayloadError, IdempotencyUsageError } from './errors.js';
import { boundKey, idempotencyKey, nativeKey } from './key.js';
import type { Outcome } from './outcome.js';

/** Default quiet period: 60,000 ms (see `OnceOptions.quietPeriodMs`). */
export const DEFAULT_QUIET_PERIOD_MS = 60_000;

/** Default bound on waiting for a locked ledger row: 2,000 ms. */
export const DEFAULT_LOCK_TIMEOUT_MS = 2_000;

/** What a guarded call receives besides its key. */
export interface CallInfo {
  /** The ledger key `${runId}:${node}[:${scope}]`: never bounded, never with a generation. */
  readonly ledgerKey: string;
  /** The key to send to the provider (also `fn`'s first argument): see `once`. */
  readonly key: string;
  /** The ledger generation (0 until an operator retry after a definitive failure). */
  readonly generation: number;
  /** Calls let through for this key so far, this one included (1 on the first call). */
  readonly call: number;
  /**
   * True when an earlier call under this key has an unknown outcome (policy `recall`, or a
   * reconcile that found nothing): the provider may already have this request.
   */
  readonly recall: boolean;
  /** `ctx.signal`: pass it to fetch or the SDK. */
  readonly signal: AbortSignal;
}

/** What a reconcile function receives besides the key (`fn`'s key: bounded, with generation). */
export interface ReconcileInfo {
  readonly ledgerKey: string;
  readonly key: string;
  readonly generation: number;
  /** When the call with the unknown outcome was let through (database clock); null if never. */
  readonly callStartedAt: Date | null;
  /** The attempt that made it. */
  readonly ownerAttempt: number;
  readonly signal: AbortSignal;
}

/**
 * A reconcile function: looks the effect up at the provider by the key (a metadata search, a
 * callback table, a list call).
 * - resolves with the call's result (the same shape `fn` returns) when the effect is found →
 *   recorded `succeeded`, returned, no call;
 * - resolves `undefined` when the effect is provably absent → called again with the same key;
 * - throws an `OutcomeError` whose outcome is `definitive` when the provider's evidence shows the
 *   call failed (a payment intent left with its decline) → recorded `failed`, thrown as
 *   `DefinitiveFailureError`, no call;
 * - throws when it cannot tell: a `NonRetryableError` (e.g. `UnknownOutcomeError`) discards the
 *   step for an operator; any other error retries the step later, reconciling again.
 */
export type Reconcile<T> = (key: string, info: ReconcileInfo) => Promise<T | undefined>;

/**
 * What to do with an unknown outcome once the quiet period is over:
 * - `'fail'` (default): discard the step with `UnknownOutcomeError` for an operator: at most
 *   once, never a duplicate, but a human decides;
 * - `'recall'`: call again with the same key: right when the provider deduplicates by key
 *   (Stripe within 24 h), at-least-once otherwise;
 * - a reconcile function (see `Reconcile`).
 */
export type UnknownPolicy<T> = 'fail' | 'recall' | Reconcile<T>;

/** Options of `once`. Durations are in milliseconds. */
export interface OnceOptions<T> {
  /** One per distinct external call of the handler; the key is `${runId}:${node}:${scope}`. */
  scope?: string;
  /**
   * The call's parameters, as JSON (use `null` for none). Hashed canonically (with `provider` and
   * `operation`); the same key with another request is an `IdempotencyMismatchError`.
   */
  request: unknown;
  /** The unknown-outcome policy. Default `'fail'`. */
  onUnknown?: UnknownPolicy<NoInfer<T>>;
  /**
   * How long after a call was let through its outcome may still arrive — the call's worst-case
   * duration (timeout × (retries + 1) + backoff). Within it, an unknown
   * outcome left by an earlier attempt is "in progress", never called over: the step snoozes
   * until it ends (`InProgressError`, no attempt used), then the policy runs. Default `DEFAULT_QUIET_PERIOD_MS` (60 s: enough for a call with a 30 s timeout
   * and one retry). Set it per provider; keep per-call timeouts below it.
   */
  quietPeriodMs?: number;
  /**
   * Classifies a failed call; return `undefined` to fall back to `classifyError`. Adapters pass
   * their provider's table.
   */
  classify?: (err: unknown) => Outcome | undefined;
  /** Label stored with the row and hashed with the request, e.g. `stripe`. */
  provider?: string;
  /** Label stored with the row and hashed with the request, e.g. `POST /v1/refunds`. */
  operation?: string;
  /**
   * Record `succeeded` on `ctx.completionTx()` (opened after the call if the handler has not
   * opened it), so the ledger row and the step's completion commit together or not at all.
   * Default false: `succeeded` is committed on its own right after the call, so it survives a
   * crash before the step completes (the next attempt replays it with no call). With true, such
   * a crash leaves the row `started` — an unknown outcome for the policy — so use it with a
   * provider that deduplicates by key and `onUnknown: 'recall'`, or a reconcile function.
   */
  useCompletionTx?: boolean;
  /** The provider's key length limit: the key given to `fn` is `boundKey`-ed to it (≥ 67). */
  maxKeyLength?: number;
  /**
   * Extracts the provider's reference (`pi_…`, `SM…`) from the result, stored as `provider_ref`.
   * Annotate its parameter (`(r: Charge) => r.id`): TypeScript infers the result type from `fn`,
   * which comes after the options, so an unannotated parameter would be `unknown`.
   */
  reference?: (result: T) => string | null | undefined;
  /** Longest wait for a ledger row locked by another transaction, then a retryable conflict. */
  lockTimeoutMs?: number;
}

/** The options of one `once` call, validated, with defaults applied, key and hash computed. */
export interface Normalised<T> {
  key: string;
  scope: string | null;
  hash: string;
  onUnknown: UnknownPolicy<T>;
  quietPeriodMs: number;
  classify: ((err: unknown) => Outcome | undefined) | undefined;
  provider: string | null;
  operation: string | null;
  useCompletionTx: boolean;
  maxKeyLength: number | undefined;
  reference: ((result: T) => string | null | undefined) | undefined;
  lockTimeoutMs: number;
}

/**
 * Validates `once`'s arguments and computes the ledger key and the request hash.
 * @throws IdempotencyUsageError, IdempotencyKeyError or IdempotencyPayloadError, before anything
 *   is written.
 */
export function normalise<T>(
  ctx: Context,
  options: OnceOptions<T>,
  fn: (key: string, info: CallInfo) => Promise<T>,
): Normalised<T> {
  if (!ctx || typeof ctx !== 'object' || !ctx.client || typeof ctx.attempt !== 'number') {
    throw new IdempotencyUsageError('once() needs the handler ctx as its first argument');
  }
  if (!options || typeof options !== 'object') {
    throw new IdempotencyUsageError('once() needs options ({ request, ... })');
  }
  if (typeof fn !== 'function') {
    throw new IdempotencyUsageError('once() needs the call as a function (key, info) => result');
  }
  const key = idempotencyKey(ctx, options.scope);
  const onUnknown = options.onUnknown ?? 'fail';
  if (onUnknown !== 'fail' && onUnknown !== 'recall' && typeof onUnknown !== 'function') {
    throw new IdempotencyUsageError(
      `onUnknown must be 'fail', 'recall' or a reconcile function, got ${JSON.stringify(onUnknown)}`,
    );
  }
  const quietPeriodMs = options.quietPeriodMs ?? DEFAULT_QUIET_PERIOD_MS;
  if (typeof quietPeriodMs !== 'number' || !Number.isFinite(quietPeriodMs) || quietPeriodMs < 0) {
    throw new IdempotencyUsageError(
      `quietPeriodMs must be a finite number ≥ 0, got ${quietPeriodMs}`,
    );
  }
  const lockTimeoutMs = options.lockTimeoutMs ?? DEFAULT_LOCK_TIMEOUT_MS;
  if (!Number.isInteger(lockTimeoutMs) || lockTimeoutMs < 1) {
    throw new IdempotencyUsageError(`lockTimeoutMs must be an integer ≥ 1, got ${lockTimeoutMs}`);
  }
  if (options.classify !== undefined && typeof options.classify !== 'function') {
    throw new IdempotencyUsageError('classify must be a function (err) => Outcome | undefined');
  }
  if (options.reference !== undefined && typeof options.reference !== 'function') {
    throw new IdempotencyUsageError('reference must be a function (result) => string');
  }
  for (const name of ['provider', 'operation'] as const) {
    const v = options[name];
    if (v !== undefined && (typeof v !== 'string' || v.length === 0 || v.length > 200)) {
      throw new IdempotencyUsageError(`${name} must be a string of 1 to 200 characters`);
    }
  }
  if (options.maxKeyLength !== undefined) boundKey(key, options.maxKeyLength); // validates
  if (!('request' in options) || options.request === undefined) {
    throw new IdempotencyPayloadError(
      'request',
      'options.request is required (use null for a call without parameters)',
      '$',
    );
  }
  let request: Json;
  try {
    request = toJson(options.request);
  } catch (err) {
    if (err instanceof PayloadError) {
      throw new IdempotencyPayloadError(
        'request',
        err.message.replace(/ at \S+$/, ''),
        err.path,
        err,
      );
    }
    throw err;
  }
  const provider = options.provider ?? null;
  const operation = options.operation ?? null;
  return {
    key,
    scope: options.scope ?? null,
    hash: hashJson({ provider, operation, request }),
    onUnknown,
    quietPeriodMs,
    classify: options.classify,
    provider,
    operation,
    useCompletionTx: options.useCompletionTx === true,
    maxKeyLength: options.maxKeyLength,
    reference: options.reference,
    lockTimeoutMs,
  };
}

/** The key `fn` and a reconcile function get: generation suffix, then the provider's bound. */
export function sendKey<T>(opts: Normalised<T>, generation: number): string {
  const k = nativeKey(opts.key, generation);
  return opts.maxKeyLength === undefined ? k : boundKey(k, opts.maxKeyLength);
}
