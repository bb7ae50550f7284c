/**
 * What `idempotentFetch` needs to know of an API's idempotency key, and presets for APIs that
 * document one. Every fact of a preset comes from the provider's own documentation, cited
 * beside it (and in the README); what a page does not say is marked as not documented, and the
 * preset then takes the cautious choice.
 */
import type { KeyFormat } from './keys.js';

/** Which answers mean "same key, another request" (the IETF draft's mismatch). */
export interface MismatchRule {
  /** Statuses that may carry it. */
  statuses: readonly number[];
  /** When given, the body must also match (for APIs that answer it with a generic status). */
  bodyPattern?: RegExp;
}

/**
 * An API's idempotency semantics. `idempotentFetch` takes one as `preset` (or a name of
 * `presets`); its own options override any field.
 */
export interface HttpPreset {
  /** Stored as the ledger rows' provider and hashed with each request, e.g. `paypal`. */
  readonly name: string;
  /** The request header that carries the key. Default `Idempotency-Key`. */
  readonly keyHeader?: string;
  /**
   * Instead of a header: the top-level string field of the JSON object body that carries the key
   * (Square's `idempotency_key`).
   */
  readonly keyField?: string;
  /** How the header value is written: `token` (default) or the IETF draft's `sf-string`. */
  readonly keyFormat?: KeyFormat;
  /** The longest key the API takes; longer keys are fitted (see `fitKey`). Default: no limit. */
  readonly maxKeyLength?: number;
  /**
   * How long the API keeps a key, in ms; undefined when it publishes no period. A lost answer is
   * re-sent (`onUnknown: 'recall'`) only within it, less a margin; past it the step stops for
   * an operator (`UnknownOutcomeError`), since the API would run the request again.
   */
  readonly keyRetentionMs?: number;
  /**
   * True when the API documents that a request repeated with its key returns the earlier outcome
   * instead of running again: a lost answer is then re-sent by default (`onUnknown: 'recall'`);
   * false → `'fail'` by default. Default true.
   */
  readonly replaysByKey?: boolean;
  /**
   * Statuses that mean "a request with this key is still in progress" (the draft's 409). When
   * the API documents one, a re-send while the first is in flight is safe, so the quiet period
   * defaults to 0; when it documents none (`[]`), to the request timeout plus 5 s. Default `[409]`.
   */
  readonly conflictStatuses?: readonly number[];
  /**
   * Answers that mean "this key was used with another request": a non-retryable determinism
   * error. Default: the draft's `{ statuses: [422] }`; null for none.
   */
  readonly mismatch?: MismatchRule | null;
  /**
   * True when the API stores an executed error answer (a 5xx included) under the key and
   * replays it: a re-sent key that gets a 5xx again got the stored answer, which will never
   * change, so it is a definitive failure (an operator retry sends a fresh key generation), not
   * another unknown outcome. Default false.
   */
  readonly storesErrors?: boolean;
  /**
   * Statuses that, with a `Retry-After` (or a rate-limit reset header), ask to come back later:
   * the call is recorded as not sent and the step snoozes until then without using an attempt.
   * A 429 does so even without one (then the rate-limit backoff). Default `[429, 503]`.
   */
  readonly retryAfterStatuses?: readonly number[];
  /** Response headers to keep with a stored answer, besides `DEFAULT_KEPT_HEADERS`. */
  readonly keepHeaders?: readonly string[];
  /** Where the facts come from. */
  readonly docs?: readonly string[];
}

const HOUR = 3_600_000;
const DAY = 24 * HOUR;

/**
 * The IETF HTTPAPI working group's draft (draft-ietf-httpapi-idempotency-key-header-07): the
 * `Idempotency-Key` header is an RFC 8941 String (`"…"`); a repeated request gets "the result of
 * the previously completed operation, success or an error"; a request while the first is still
 * being processed gets `409`; the key with another payload gets `422`. Length and expiry are
 * left to each server ("SHOULD define such expiration policy and publish it").
 * This is also the semantics `idempotentFetch` assumes without a preset, except the key format
 * (a bare token, as the providers below send it).
 */
const ietf: HttpPreset = Object.freeze({
  name: 'ietf-draft',
  keyHeader: 'Idempotency-Key',
  keyFormat: 'sf-string',
  replaysByKey: true,
  conflictStatuses: [409],
  mismatch: { statuses: [422] },
  storesErrors: true,
  docs: [
    'https://datatracker.ietf.org/doc/html/draft-ietf-httpapi-idempotency-key-header',
    'https://github.com/ietf-wg-httpapi/idempotency/blob/main/draft-ietf-httpapi-idempotency-key-header.md',
  ],
});

/**
 * PayPal REST APIs: the `PayPal-Request-Id` header on POST calls. The Orders v2 create-order
 * reference: 1 to 108 characters, "The server stores keys for 6 hours" (up to 72 hours by asking
 * an account manager). The idempotency guideline: a repeated ID returns "the latest status of
 * the previous request" (not necessarily its first body); calls that failed "with network
 * timeouts or HTTP 5xx" may be retried "for as long as the server stores the ID" (so a 5xx is
 * not a stored, final answer); of two simultaneous requests PayPal "processes the first request
 * and might fail the second" (no status named: a quiet period instead of a conflict status). No
 * error is documented for an ID reused with another body.
 */
const paypal: HttpPreset = Object.freeze({
  name: 'paypal',
  keyHeader: 'PayPal-Request-Id',
  maxKeyLength: 108,
  keyRetentionMs: 6 * HOUR,
  replaysByKey: true,
  conflictStatuses: [],
  mismatch: null,
  storesErrors: false,
  docs: [
    'https://developer.paypal.com/reference/guidelines/idempotency',
    'https://developer.paypal.com/api/orders/v2/orders-create',
  ],
});

/**
 * Adyen: the `Idempotency-Key` header on POST requests, "a maximum of 64 characters"; if the
 * platform already processed the request, "the response to the first attempt will be returned
 * without duplication" (the response echoes the key in its `Idempotency-Key` header); keys are
 * "valid for a minimum period of 31 days after first submission", per company account, and not
 * checked across regional endpoints. The page names no status for a request in flight or for a
 * key reused with another body (so a quiet period, and a 4xx stays definitive).
 */
const adyen: HttpPreset = Object.freeze({
  name: 'adyen',
  keyHeader: 'Idempotency-Key',
  maxKeyLength: 64,
  keyRetentionMs: 31 * DAY,
  replaysByKey: true,
  conflictStatuses: [],
  mismatch: null,
  storesErrors: false,
  docs: ['https://docs.adyen.com/development-resources/api-idempotency'],
});

/**
 * Square: the key is the `idempotency_key` field of the JSON body (CreatePayment: 1 to 45
 * characters, per Square's SDK model reference). The same request with the same key "returns the
 * response as the first successful CreatePayment response"; a changed request with the key gets
 * "an error indicating that you used the idempotency key previously" (no status or code named,
 * so a 400/409/422 whose body mentions idempotency is taken for it); "this behavior might vary
 * depending on the API". Square publishes no retention period (its developer forum, answered by
 * Square staff), so a lost answer is re-sent without a time bound: set `keyRetentionMs` if you
 * know better. Nothing is documented for a request in flight (a quiet period).
 */
const square: HttpPreset = Object.freeze({
  name: 'square',
  keyField: 'idempotency_key',
  maxKeyLength: 45,
  replaysByKey: true,
  conflictStatuses: [],
  mismatch: { statuses: [400, 409, 422], bodyPattern: /idempoten/i },
  storesErrors: false,
  docs: [
    'https://developer.squareup.com/docs/working-with-apis/idempotency',
    'https://github.com/square/square-php-sdk/blob/master/doc/models/create-payment-request.md',
    'https://developer.squareup.com/forums/t/how-long-are-idempotency-keys-retained-for-the-createpayment-endpoint/28303',
  ],
});

/**
 * Easyship (a shipping API): the `Idempotency-Key` header on any POST; Easyship saves "the
 * resulting status code and body of the first request … regardless of whether it succeeded or
 * failed for 24 hours", and later requests with the key "return the same result, including any
 * 400 or 500 errors". No length limit, in-flight answer or mismatch error is documented. Since a
 * stored 5xx comes back on every re-send, a 503 is not taken for "come back later" here.
 */
const easyship: HttpPreset = Object.freeze({
  name: 'easyship',
  keyHeader: 'Idempotency-Key',
  keyRetentionMs: DAY,
  replaysByKey: true,
  conflictStatuses: [],
  mismatch: null,
  storesErrors: true,
  retryAfterStatuses: [429],
  docs: ['https://developers.easyship.com/v2023.01/reference/idempotent-requests'],
});

/**
 * Presets for APIs that document an idempotency key: `ietf` (the draft), `paypal`, `adyen`,
 * `square` (the key in the JSON body), `easyship`. Pass one as `idempotentFetch(ctx, { preset:
 * presets.paypal })` or by name (`preset: 'paypal'`).
 */
export const presets = Object.freeze({ ietf, paypal, adyen, square, easyship });

/** The names of `presets`. */
export type PresetName = keyof typeof presets;
