/**
 * The typed errors of `@cyclone/http`, each with a stable `code`. What `idempotentFetch` throws
 * besides them are `@cyclone/idempotency`'s errors (the ledger's verdict on a call), with an
 * `HttpResponseError` as their `cause` when the API answered.
 */
import { CycloneError, NonRetryableError, SnoozeError } from '@cyclone/core';
import type { StoredResponse } from './stored-response.js';

/**
 * The API answered a guarded request with a status that is not a completed call (by default
 * 400 and above). Thrown inside the guarded call, then classified: `once` rethrows it as the
 * `cause` of a `DefinitiveFailureError`, `AmbiguousOutcomeError`, `RateLimitedError`,
 * `IdempotencyMismatchError`, … `code` is `HTTP_RESPONSE`.
 */
export class HttpResponseError extends CycloneError {
  /** The HTTP status. */
  readonly status: number;
  /** The response's headers, names lower-cased (all of them, not only the kept ones). */
  readonly headers: Readonly<Record<string, string>>;
  /** The answer as the ledger would keep it (kept headers only). */
  readonly response: StoredResponse;
  /** The key the request carried. */
  readonly key: string;
  /** True when the request re-sent a key whose earlier call had an unknown outcome. */
  readonly recall: boolean;
  /** Calls made under the key so far, this one included. */
  readonly call: number;

  constructor(
    method: string,
    response: StoredResponse,
    headers: Record<string, string>,
    sent: { key: string; recall: boolean; call: number },
  ) {
    const text = response.bodyEncoding === 'utf8' ? (response.body ?? '') : '';
    const detail = text.trim().replace(/\s+/g, ' ').slice(0, 300);
    super(
      'HTTP_RESPONSE',
      `${method} ${response.url} answered ${response.status}${response.statusText ? ` ${response.statusText}` : ''}${detail ? `: ${detail}` : ''}`,
    );
    this.status = response.status;
    this.headers = headers;
    this.response = response;
    this.key = sent.key;
    this.recall = sent.recall;
    this.call = sent.call;
  }

  /** The body as text (base64 for a binary body), '' when there was none. */
  get body(): string {
    return this.response.body ?? '';
  }
}

/** What kind of request body `idempotentFetch` refused (see `UnsupportedBodyError`). */
export type UnsupportedBodyKind = 'stream' | 'async-iterable' | 'form-data' | 'object';

/**
 * A request body that cannot be hashed and sent again byte for byte: a `ReadableStream`, an async
 * iterable (a Node stream), `FormData` (its multipart boundary is new on every encoding), or a
 * plain object (fetch would send `[object Object]`). Thrown before anything is written or sent.
 * Non-retryable: the same handler fails the same way. `code` is `HTTP_UNSUPPORTED_BODY`.
 */
export class UnsupportedBodyError extends NonRetryableError {
  readonly kind: UnsupportedBodyKind;

  constructor(kind: UnsupportedBodyKind, message: string) {
    super(message, { code: 'HTTP_UNSUPPORTED_BODY' });
    this.kind = kind;
  }
}

/**
 * The API reported a request with this key still in progress (the IETF draft's `409 Conflict`):
 * the step snoozes (a `SnoozeError`: no attempt used, no error entry) for the time the answer's
 * `Retry-After` names, else the rate-limit backoff, then sends again with the same key, which
 * gets the first request's answer once it has completed. The ledger keeps the call stamped, so
 * the next attempt applies the unknown-outcome policy. `code` is `HTTP_KEY_IN_USE`; `cause` is
 * the ledger's `IdempotencyConflictError` (whose `cause` is the `HttpResponseError`).
 */
export class HttpKeyInUseError extends SnoozeError {
  readonly key: string;
  readonly status: number;

  constructor(key: string, status: number, delayMs: number, cause: unknown) {
    super(
      delayMs,
      `the API answered ${status}: a request with idempotency key ${key} is still in progress there; sending again with the same key in ${Math.ceil(delayMs)} ms without using an attempt`,
    );
    (this as { code: string }).code = 'HTTP_KEY_IN_USE';
    Object.defineProperty(this, 'cause', {
      value: cause,
      writable: true,
      configurable: true,
      enumerable: false,
    });
    this.key = key;
    this.status = status;
  }
}
