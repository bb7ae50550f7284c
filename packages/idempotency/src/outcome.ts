/**
 * The outcome classification every adapter reuses: what a failed provider call means for the
 * effect, and so what the ledger records and whether a later attempt may call again.
 */
import { CycloneError } from '@cyclone/core';
import { isNonRetryable } from '@cyclone/core/internal';
import { type ResponseHeaders, retryAfterMs } from './retry-after.js';

/**
 * - `not_sent`: the request provably never took effect (refused connection, DNS failure, 429):
 *   retry freely, the row goes back to "no call made"; a rate-limit answer (`rateLimited`)
 *   snoozes the step instead of using an attempt.
 * - `definitive`: the provider answered and nothing will ever change that answer (a 4xx such as
 *   a card decline): record `failed` and stop; later attempts replay the error.
 * - `ambiguous`: the request may or may not have taken effect (timeout, connection reset after
 *   sending, 5xx): record `unknown`; a later attempt applies the `onUnknown` policy.
 * - `determinism`: the provider saw a different request under the same key (Stripe's 400
 *   `idempotency_error`): a non-retryable bug in the handler.
 * - `conflict`: a request with this key is in progress at the provider (HTTP 409,
 *   `idempotency_key_in_use`): back off and retry with the same key.
 */
export type OutcomeKind = 'not_sent' | 'definitive' | 'ambiguous' | 'determinism' | 'conflict';

/** The kinds, for validation. */
export const OUTCOME_KINDS: readonly OutcomeKind[] = Object.freeze([
  'not_sent',
  'definitive',
  'ambiguous',
  'determinism',
  'conflict',
]);

/**
 * A classified outcome of a failed provider call. Only `kind` drives behaviour; the other fields
 * are recorded in the ledger row's `error` for operators.
 */
export interface Outcome {
  kind: OutcomeKind;
  /** A short human reason, e.g. `HTTP 402` or `ECONNRESET`. */
  reason?: string;
  /** The HTTP status, when there was one. */
  status?: number;
  /** The provider's or the transport's error code, e.g. `card_declined`, `ECONNREFUSED`. */
  code?: string;
  /**
   * With kind `not_sent`: the provider asked to slow down (HTTP 429, or a 503 that the provider
   * documents as throttling, not processed). `once` records the call as not sent and snoozes the
   * step (`RateLimitedError`, a `SnoozeError`: no attempt used, no error entry) for
   * `retryAfterMs`, or `rateLimitBackoffMs` when the answer named no time; the next attempt
   * calls again with the same key.
   */
  rateLimited?: boolean;
  /** With `rateLimited`: the wait the answer named (`retryAfterMs(headers)`), in ms. */
  retryAfterMs?: number;
}

/** True when `value` is an `Outcome` with a known `kind`. */
export function isOutcome(value: unknown): value is Outcome {
  return (
    typeof value === 'object' &&
    value !== null &&
    OUTCOME_KINDS.includes((value as { kind?: unknown }).kind as OutcomeKind)
  );
}

/**
 * Classifies an HTTP error status, by what each range says about the request's execution:
 * 408, 425 and 429 → `not_sent` (the server did not process the request), 429 also
 * `rateLimited`, with the wait its `headers` name (`retryAfterMs`); 409 → `conflict`; any other
 * 4xx → `definitive`; 5xx and anything else → `ambiguous` (a 500 may have been executed: Stripe
 * stores executed 500s, SendGrid and Twilio document nothing), a 503 included: none of the
 * three providers documents it as throttling.
 */
export function classifyHttpStatus(status: number, headers?: ResponseHeaders): Outcome {
  const reason = `HTTP ${status}`;
  if (status === 429) {
    const wait = retryAfterMs(headers);
    return {
      kind: 'not_sent',
      status,
      reason,
      rateLimited: true,
      ...(wait !== undefined ? { retryAfterMs: wait } : {}),
    };
  }
  if (status === 408 || status === 425) return { kind: 'not_sent', status, reason };
  if (status === 409) return { kind: 'conflict', status, reason };
  if (status >= 400 && status < 500) return { kind: 'definitive', status, reason };
  return { kind: 'ambiguous', status, reason };
}

/** Transport codes of failures before anything was written to the provider. */
const NOT_SENT_CODES = new Set([
  'ECONNREFUSED',
  'ENOTFOUND',
  'EAI_AGAIN',
  'ENETUNREACH',
  'EHOSTUNREACH',
  'UND_ERR_CONNECT_TIMEOUT',
  // deadline.ts: the socket never connected and was closed in SYN-SENT.
  'CYCLONE_DEADLINE_NOT_CONNECTED',
]);

/** Transport codes of failures that may come after the request was sent. */
const AMBIGUOUS_CODES = new Set([
  'ECONNRESET',
  'CYCLONE_DEADLINE_EXCEEDED',
  'EPIPE',
  'ETIMEDOUT',
  'ECONNABORTED',
  'ESOCKETTIMEDOUT',
  'UND_ERR_SOCKET',
  'UND_ERR_HEADERS_TIMEOUT',
  'UND_ERR_BODY_TIMEOUT',
  'UND_ERR_CLOSED',
  'ERR_STREAM_PREMATURE_CLOSE',
]);

function field(obj: unknown, name: string): unknown {
  return typeof obj === 'object' && obj !== null
    ? (obj as Record<string, unknown>)[name]
    : undefined;
}

/**
 * The default classifier of `once` (used when `options.classify` is absent or returns
 * `undefined`), in this order:
 * 1. an error carrying an `outcome` (an `OutcomeError`, or any error with a valid `outcome`
 *    property) → that outcome;
 * 2. a `NonRetryableError` thrown by the call → `definitive` (the caller's own verdict);
 * 3. an abort (`AbortError`, `TimeoutError`, a `LeaseLostError`/`StepTimeoutError` signal
 *    reason) → `ambiguous`: the request may already be on the wire;
 * 4. a transport code on the error or its `cause` (fetch wraps them): connection refused, DNS →
 *    `not_sent`; reset, timeout, broken pipe, premature close → `ambiguous`;
 * 5. an HTTP status (`status`, `statusCode` or `response.status`) → `classifyHttpStatus`, with
 *    the error's `headers` or `response.headers` (a 429's `Retry-After`);
 * 6. anything else → `ambiguous`. Never guess "not sent": a wrong guess is a double effect.
 */
export function classifyError(err: unknown): Outcome {
  const own = field(err, 'outcome');
  if (isOutcome(own)) return own;
  // By the error's marker, not instanceof: a second installed copy of core is recognised too.
  if (isNonRetryable(err) && CycloneError.isInstance(err)) {
    return { kind: 'definitive', reason: err.message.slice(0, 200), code: err.code };
  }
  const name = field(err, 'name');
  const code = field(err, 'code');
  if (
    name === 'AbortError' ||
    name === 'TimeoutError' ||
    code === 'LEASE_LOST' ||
    code === 'STEP_TIMEOUT'
  ) {
    return { kind: 'ambiguous', reason: `aborted (${String(code ?? name)})` };
  }
  for (const c of [code, field(field(err, 'cause'), 'code')]) {
    if (typeof c !== 'string') continue;
    if (NOT_SENT_CODES.has(c)) return { kind: 'not_sent', code: c, reason: c };
    if (AMBIGUOUS_CODES.has(c)) return { kind: 'ambiguous', code: c, reason: c };
  }
  const status =
    field(err, 'status') ?? field(err, 'statusCode') ?? field(field(err, 'response'), 'status');
  if (typeof status === 'number' && Number.isInteger(status) && status >= 400) {
    const headers = field(err, 'headers') ?? field(field(err, 'response'), 'headers');
    return classifyHttpStatus(status, headers as ResponseHeaders);
  }
  return { kind: 'ambiguous', reason: 'unclassified error' };
}
