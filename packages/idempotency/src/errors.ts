/**
 * The typed errors of `@cyclone/idempotency`: classes with a stable `code` and the data a caller
 * needs, so that callers branch on data rather than on message text. Adapters rethrow these as
 * they are.
 *
 * Three families, by what the step runner of `@cyclone/core` does with them:
 * - non-retryable (they extend `NonRetryableError`, so the step is discarded at once): bad
 *   input, determinism, a definitive failure, an unknown outcome under policy `fail`;
 * - retryable (plain `CycloneError`s, an attempt used): not sent, ambiguous, conflict;
 * - snoozes (they extend `SnoozeError`: the step runs again later without using an attempt and
 *   without an error entry): in progress (a quiet period), rate limited.
 */
import { CycloneError, MAX_DELAY_MS, NonRetryableError, SnoozeError } from '@cyclone/core';
import type { Outcome } from './outcome.js';

/** `NonRetryableError` fixes its code; the subclasses here each need their own stable code. */
function setCode(err: CycloneError, code: string): void {
  (err as { code: string }).code = code;
}

/**
 * A failed call as stored in the ledger's `error` column (and replayed from it): the error's
 * name, message (≤ 2,000 characters), `code` and HTTP `status` when it had them, the outcome
 * kind and reason, and when it was recorded (ISO-8601).
 */
export interface StoredFailure {
  name: string;
  message: string;
  code?: string;
  status?: number;
  outcome: Outcome['kind'];
  reason?: string;
  at: string;
}

/**
 * A bad scope or key: empty, not visible ASCII, containing `#` (reserved for the generation
 * suffix), longer than `MAX_SCOPE_LENGTH`, or a key limit too small to hold a bounded key.
 * Thrown before anything is written. Non-retryable: the same code fails the same way.
 */
export class IdempotencyKeyError extends NonRetryableError {
  constructor(message: string) {
    super(message);
    setCode(this, 'IDEMPOTENCY_KEY');
  }
}

/**
 * The request (or the call's result) cannot be stored as JSON without losing data: `undefined`,
 * a function, a BigInt, NaN, a cycle, a NUL character, a class instance, or a result over the
 * client's `maxPayloadBytes`. `what` says which; `path` points into it (`$.items[2]`).
 * A bad request is thrown before anything is written; a bad result after the call, with the row
 * left `unknown` (the effect happened but its result could not be kept).
 */
export class IdempotencyPayloadError extends NonRetryableError {
  readonly what: 'request' | 'result';
  readonly path: string;

  constructor(what: 'request' | 'result', message: string, path: string, cause?: unknown) {
    super(`the ${what} of a guarded call cannot be stored as JSON: ${message}`, { cause });
    setCode(this, 'IDEMPOTENCY_PAYLOAD');
    this.what = what;
    this.path = path;
  }
}

/** An option of `once`, `insertOnce`, `upsertOnce`, `resolveKey` or `reapLedger` is invalid. */
export class IdempotencyUsageError extends NonRetryableError {
  constructor(message: string) {
    super(message);
    setCode(this, 'IDEMPOTENCY_USAGE');
  }
}

/**
 * The same key was used with a different request (outcome `determinism`): the handler's
 * parameters are not deterministic across attempts (time, randomness, changed code), or the
 * provider reported that its own key saw different parameters. Mirrors Stripe's 400
 * `idempotency_error` and the IETF draft's 422. Non-retryable; no call is made.
 */
export class IdempotencyMismatchError extends NonRetryableError {
  readonly key: string;
  readonly outcome: Outcome;
  /** Hash stored with the key (absent when the provider reported the mismatch). */
  readonly storedHash: string | undefined;
  /** Hash of this call's request. */
  readonly requestHash: string;

  constructor(
    key: string,
    requestHash: string,
    storedHash?: string,
    detail?: string,
    cause?: unknown,
  ) {
    super(
      `idempotency key ${key} was used with a different request${detail ? ` (${detail})` : ''}: a handler's request must be the same on every attempt (no time, randomness or changed parameters in it)`,
      { cause },
    );
    setCode(this, 'IDEMPOTENCY_MISMATCH');
    this.key = key;
    this.outcome = { kind: 'determinism', reason: detail ?? 'request hash differs' };
    this.storedHash = storedHash;
    this.requestHash = requestHash;
  }
}

/**
 * The call failed definitively (outcome `definitive`), now or on an earlier attempt
 * (`replayed`). The ledger row is `failed`; attempts of the step replay this error without
 * calling until an operator retries the discarded step, which calls again under generation + 1
 * (a fresh native key). Non-retryable.
 */
export class DefinitiveFailureError extends NonRetryableError {
  readonly key: string;
  readonly generation: number;
  readonly failure: StoredFailure;
  /** True when replayed from the ledger without calling. */
  readonly replayed: boolean;
  readonly outcome: Outcome;

  constructor(
    key: string,
    generation: number,
    failure: StoredFailure,
    replayed: boolean,
    cause?: unknown,
  ) {
    super(
      `${replayed ? 'replayed from the ledger, not called: ' : ''}the call under key ${key}${generation > 0 ? ` (generation ${generation})` : ''} failed definitively: ${failure.message}`,
      { cause },
    );
    setCode(this, 'IDEMPOTENCY_DEFINITIVE');
    this.key = key;
    this.generation = generation;
    this.failure = failure;
    this.replayed = replayed;
    this.outcome = {
      kind: 'definitive',
      ...(failure.reason ? { reason: failure.reason } : {}),
      ...(failure.status !== undefined ? { status: failure.status } : {}),
      ...(failure.code !== undefined ? { code: failure.code } : {}),
    };
  }
}

/**
 * Policy `fail`: an earlier call under this key has an unknown outcome (it may or may not have
 * taken effect) and the quiet period is over. The step is discarded for an operator, who checks
 * the provider and then uses `resolveKey` (succeeded with the result, or not sent) and
 * `client.retry`. Non-retryable.
 */
export class UnknownOutcomeError extends NonRetryableError {
  readonly key: string;
  /** When the call with the unknown outcome was let through. */
  readonly callStartedAt: Date | null;
  /** The attempt that made it. */
  readonly ownerAttempt: number;
  readonly outcome: Outcome;

  constructor(key: string, ownerAttempt: number, callStartedAt: Date | null, reason?: string) {
    super(
      `unknown outcome for idempotency key ${key}: the call made by attempt ${ownerAttempt}${callStartedAt ? ` at ${callStartedAt.toISOString()}` : ''} may or may not have taken effect${reason ? ` (${reason})` : ''}; policy 'fail' stops here without calling again. Check the provider, then resolveKey() and retry the step`,
    );
    setCode(this, 'IDEMPOTENCY_UNKNOWN_OUTCOME');
    this.key = key;
    this.ownerAttempt = ownerAttempt;
    this.callStartedAt = callStartedAt;
    this.outcome = { kind: 'ambiguous', ...(reason ? { reason } : {}) };
  }
}

/**
 * The call's outcome is ambiguous (timeout, reset after sending, 5xx). Recorded as `unknown`;
 * retryable: a later attempt applies the `onUnknown` policy once the quiet period is over.
 */
export class AmbiguousOutcomeError extends CycloneError {
  readonly key: string;
  readonly outcome: Outcome;

  constructor(key: string, outcome: Outcome, cause?: unknown) {
    super(
      'IDEMPOTENCY_AMBIGUOUS',
      `the call under key ${key} may or may not have taken effect (${outcome.reason ?? 'ambiguous'}); recorded as unknown, a later attempt applies the unknown-outcome policy`,
      { cause },
    );
    this.key = key;
    this.outcome = outcome;
  }
}

/**
 * The call provably did not take effect (outcome `not_sent`). The row is left with no call in
 * flight, so the next attempt calls again at once with the same key. Retryable.
 */
export class NotSentError extends CycloneError {
  readonly key: string;
  readonly outcome: Outcome;

  constructor(key: string, outcome: Outcome, cause?: unknown) {
    super(
      'IDEMPOTENCY_NOT_SENT',
      `the call under key ${key} was not sent (${outcome.reason ?? 'not sent'}); the next attempt calls again`,
      { cause },
    );
    this.key = key;
    this.outcome = outcome;
  }
}

/** Added to a quiet period's remaining time, so the next attempt finds it over: 100 ms. */
export const QUIET_PERIOD_MARGIN_MS = 100;

/** A snooze's delay: rounded up, within 0 … `MAX_DELAY_MS` (what `SnoozeError` accepts). */
function snoozeDelay(ms: number): number {
  return Number.isFinite(ms) ? Math.min(MAX_DELAY_MS, Math.max(0, Math.ceil(ms))) : MAX_DELAY_MS;
}

/**
 * An earlier attempt's call under this key may still be in flight (a zombie whose lease was
 * lost): within the quiet period nobody else calls, as an HTTP API answers 409 to a request
 * whose key is still being processed. A `SnoozeError`: the step waits in state `scheduled` until
 * the quiet period is over (`retryAfterMs` + `QUIET_PERIOD_MARGIN_MS`) without using an attempt
 * or writing an error entry, then the unknown-outcome policy runs, however short the action's
 * backoff and however few its attempts. Reconcile policies throw it too, for "not found yet"
 * (`InProgressError.lookingAgain`). `code` is `IDEMPOTENCY_IN_PROGRESS`.
 */
export class InProgressError extends SnoozeError {
  readonly key: string;
  readonly ownerAttempt: number;
  /** What is left of the wait (the quiet period, or a reconcile's deadline), ms. */
  readonly retryAfterMs: number;

  /**
   * @param delayMs the snooze; default `retryAfterMs` + `QUIET_PERIOD_MARGIN_MS`.
   * @param message default: the quiet-period wording, with `retryAfterMs` as "ms left".
   */
  constructor(
    key: string,
    ownerAttempt: number,
    retryAfterMs: number,
    options: { delayMs?: number; message?: string } = {},
  ) {
    super(
      snoozeDelay(options.delayMs ?? retryAfterMs + QUIET_PERIOD_MARGIN_MS),
      options.message ??
        `a call under idempotency key ${key} by attempt ${ownerAttempt} may still be in progress; waiting out the quiet period (${Math.ceil(retryAfterMs)} ms left) before applying the unknown-outcome policy`,
    );
    setCode(this, 'IDEMPOTENCY_IN_PROGRESS');
    this.key = key;
    this.ownerAttempt = ownerAttempt;
    this.retryAfterMs = retryAfterMs;
  }

  /**
   * For a reconcile that found nothing yet and takes "nothing" for "not sent" only `leftMs` from
   * now (`assumeNotSentAfterMs`): snoozes half the time waited since the call (`waitedMs`), at
   * least 1 s and at most until that deadline, so looks thin out as the wait grows and a long
   * deadline stays within `maxSnoozes`.
   */
  static lookingAgain(
    key: string,
    ownerAttempt: number,
    waitedMs: number,
    leftMs: number,
  ): InProgressError {
    const delayMs = Math.min(leftMs + QUIET_PERIOD_MARGIN_MS, Math.max(1_000, waitedMs / 2));
    return new InProgressError(key, ownerAttempt, leftMs, {
      delayMs,
      message: `nothing found yet for idempotency key ${key} (the call by attempt ${ownerAttempt}); looking again in ${Math.ceil(delayMs)} ms, taken as not sent in ${Math.ceil(leftMs)} ms`,
    });
  }
}

/**
 * The provider asked to slow down (outcome `not_sent` with `rateLimited`: HTTP 429): the call
 * is recorded as not sent, so the next attempt calls again with the same key, and the step
 * snoozes (a `SnoozeError`: no attempt used, no error entry) until the time the answer named
 * (`Retry-After`, a rate-limit reset header), or for `rateLimitBackoffMs` when it named none.
 * `code` is `IDEMPOTENCY_RATE_LIMITED`; `cause` is the call's error.
 */
export class RateLimitedError extends SnoozeError {
  readonly key: string;
  readonly outcome: Outcome;
  /** The wait the provider's answer named, ms; `undefined` when it named none. */
  readonly retryAfterMs: number | undefined;

  constructor(key: string, outcome: Outcome, delayMs: number, cause?: unknown) {
    const delay = snoozeDelay(delayMs);
    super(
      delay,
      `the provider rate-limited the call under key ${key} (${outcome.reason ?? 'rate limited'}); recorded as not sent, calling again in ${delay} ms${outcome.retryAfterMs === undefined ? ' (no time named: backoff)' : ''} without using an attempt`,
    );
    setCode(this, 'IDEMPOTENCY_RATE_LIMITED');
    if (cause !== undefined) {
      Object.defineProperty(this, 'cause', {
        value: cause,
        writable: true,
        configurable: true,
        enumerable: false,
      });
    }
    this.key = key;
    this.outcome = outcome;
    this.retryAfterMs = outcome.retryAfterMs;
  }
}

/**
 * Outcome `conflict`: the key is busy — another `once` of this same attempt is calling under it
 * (with another `ctx` object), the ledger row stayed locked past `lockTimeoutMs`, or the
 * provider answered 409 (a request with this key in progress there). Retryable with the same key.
 */
export class IdempotencyConflictError extends CycloneError {
  readonly key: string;
  readonly outcome: Outcome;

  constructor(key: string, reason: string, cause?: unknown) {
    super('IDEMPOTENCY_CONFLICT', `idempotency key ${key} is busy: ${reason}`, { cause });
    this.key = key;
    this.outcome = { kind: 'conflict', reason };
  }
}

/**
 * An error a guarded call (or an adapter) throws to state its outcome explicitly; the default
 * classifier honours `outcome`. Example: `throw new OutcomeError({ kind: 'definitive', status:
 * 402, code: 'card_declined' }, 'card declined')`.
 */
export class OutcomeError extends CycloneError {
  readonly outcome: Outcome;

  constructor(outcome: Outcome, message: string, options?: { cause?: unknown }) {
    super('PROVIDER_CALL', message, options);
    this.outcome = outcome;
  }
}
