/**
 * Outcome classification of a failed Stripe call, from the error classes and fields the `stripe`
 * SDK gives it.
 */
import {
  classifyError,
  type Outcome,
  type OutcomeKind,
  type ResponseHeaders,
  retryAfterMs,
} from '@cyclone/idempotency';

/** Fields of a `Stripe.errors.StripeError` the classification reads. */
interface StripeErrorLike {
  type?: unknown;
  rawType?: unknown;
  statusCode?: unknown;
  code?: unknown;
  detail?: unknown;
  /** The response's headers (lower-case names), on errors Stripe answered. */
  headers?: unknown;
}

/** Transport codes of a request that never reached Stripe. */
// CYCLONE_DEADLINE_NOT_CONNECTED: the hard deadline (deadline.ts) closed a socket still in SYN-SENT.
const TRANSPORT_NOT_SENT = new Set([
  'ECONNREFUSED',
  'ENOTFOUND',
  'EAI_AGAIN',
  'CYCLONE_DEADLINE_NOT_CONNECTED',
]);

/** True for the SDK's errors: their `type` is the class name (`StripeCardError`, …). */
function isStripeError(err: unknown): err is StripeErrorLike & { type: string } {
  const type = (err as StripeErrorLike | null)?.type;
  return typeof type === 'string' && type.startsWith('Stripe') && err instanceof Error;
}

/** A throttled request (429, or the SDK's `StripeRateLimitError`): Stripe did not process it. */
function isRateLimit(e: StripeErrorLike): boolean {
  return e.type === 'StripeRateLimitError' || e.statusCode === 429;
}

function kindOf(e: StripeErrorLike & { type: string }): OutcomeKind {
  const status = typeof e.statusCode === 'number' ? e.statusCode : undefined;
  if (e.type === 'StripeIdempotencyError' || e.rawType === 'idempotency_error')
    return 'determinism';
  if (status === 409 || e.code === 'idempotency_key_in_use') return 'conflict';
  if (isRateLimit(e)) return 'not_sent';
  if (e.type === 'StripeConnectionError') {
    const detailCode = (e.detail as { code?: unknown } | undefined)?.code;
    return typeof detailCode === 'string' && TRANSPORT_NOT_SENT.has(detailCode)
      ? 'not_sent'
      : 'ambiguous';
  }
  if (status !== undefined && status >= 400 && status < 500) return 'definitive';
  // 5xx, and a StripeAPIError without a status (an unreadable body): it may have happened.
  return 'ambiguous';
}

/**
 * Classifies an error thrown by a Stripe SDK call into `@cyclone/idempotency`'s `Outcome`
 * (`kind`, plus `status`, the Stripe or transport `code`, and a `reason` such as
 * `StripeCardError 402 (card_declined)` for the ledger). The SDK's errors are recognised by their
 * `type` (the class name), never by `instanceof`, so a second copy of the SDK (CJS and ESM)
 * classifies the same:
 * - `determinism`: `StripeIdempotencyError` (`idempotency_error`): the key was used with other
 *   parameters or on another endpoint: the handler is not deterministic; never retried.
 * - `conflict`: HTTP 409 or code `idempotency_key_in_use`: a request with this key is still in
 *   flight at Stripe; retry later with the same key (the SDK maps any v1 409 to
 *   `StripeAPIError`).
 * - `not_sent`: 429 `StripeRateLimitError` (the rate limiter sits in front of the idempotency
 *   layer, so a retry with the same key runs again), also `rateLimited`, with the wait its
 *   `Retry-After` names if it has one (`retryAfterMs`): `once` snoozes the step for it; and a
 *   `StripeConnectionError` for a refused connection or a DNS failure.
 * - `definitive`: any other 4xx: 400/404 `StripeInvalidRequestError`, 401, 402 `StripeCardError`,
 *   403: nothing was done, and the same request would fail again.
 * - `ambiguous`: other `StripeConnectionError`s (reset, timeout, cut-off body; the SDK already
 *   re-sent with the same key) and 5xx: it may have happened.
 * Anything that is not a Stripe error (or carries its own `outcome`) goes to `classifyError`,
 * which never guesses "not sent".
 */
export function classifyStripeError(err: unknown): Outcome {
  if (!isStripeError(err) || (err as { outcome?: unknown }).outcome !== undefined) {
    return classifyError(err);
  }
  const kind = kindOf(err);
  const status = typeof err.statusCode === 'number' ? err.statusCode : undefined;
  const detailCode = (err.detail as { code?: unknown } | undefined)?.code;
  const code =
    typeof err.code === 'string'
      ? err.code
      : typeof detailCode === 'string'
        ? detailCode
        : undefined;
  const limited = kind === 'not_sent' && isRateLimit(err);
  const wait = limited ? retryAfterMs(err.headers as ResponseHeaders) : undefined;
  return {
    kind,
    reason: `${err.type}${status !== undefined ? ` ${status}` : ''}${code ? ` (${code})` : ''}`,
    ...(status !== undefined ? { status } : {}),
    ...(code !== undefined ? { code } : {}),
    ...(limited ? { rateLimited: true } : {}),
    ...(wait !== undefined ? { retryAfterMs: wait } : {}),
  };
}
