/**
 * What the fake stores and counts: Stripe objects by kind, the real effects of executed
 * requests, and the failure a request ends with (`ApiFailure`, the `{ error }` body on the wire).
 */
import { randomBytes } from 'node:crypto';

/** The body of a Stripe error: `{ error: StripeErrorBody }` on the wire. */
export interface StripeErrorBody {
  /** `invalid_request_error`, `card_error`, `api_error`, `idempotency_error`, … */
  type: string;
  code?: string;
  message: string;
  param?: string;
  decline_code?: string;
  doc_url?: string;
  /** A card error on a payment intent carries the intent (with `last_payment_error`). */
  payment_intent?: Record<string, unknown>;
}

/**
 * A failed API call. `stored` says whether Stripe's idempotency layer keeps the response
 * (executed requests are stored, validation failures are not).
 */
export class ApiFailure extends Error {
  readonly status: number;
  readonly body: StripeErrorBody;
  readonly stored: boolean;

  constructor(status: number, body: StripeErrorBody, stored: boolean) {
    super(body.message);
    this.status = status;
    this.body = body;
    this.stored = stored;
  }
}

/** Kinds of real effects the fake counts. A confirmed, successful payment intent is a `charge`. */
export type EffectType = 'payment_intent' | 'charge' | 'refund' | 'customer';

/** One real effect: an object created (or money moved) by an executed request. */
export interface Effect {
  type: EffectType;
  /** The object's id (`pi_…`, `ch_…`, `re_…`, `cus_…`). */
  id: string;
  /** The `Idempotency-Key` of the request that caused it, if any. */
  idempotencyKey: string | undefined;
  /** Sequence number of that request in `FakeStripe.requests`. */
  requestSeq: number;
}

/** A stored Stripe object (JSON). */
export type StripeObject = Record<string, unknown> & {
  id: string;
  object: string;
  created: number;
};

/** The objects of one fake, by kind, in creation order. */
export interface ResourceStore {
  payment_intent: Map<string, StripeObject>;
  refund: Map<string, StripeObject>;
  customer: Map<string, StripeObject>;
  /** Amount refunded so far per payment intent id (minor units). */
  refunded: Map<string, number>;
}

/** An empty store. */
export function newStore(): ResourceStore {
  return { payment_intent: new Map(), refund: new Map(), customer: new Map(), refunded: new Map() };
}

const ALNUM = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';

/** A Stripe-looking id: `prefix_` + 24 alphanumerics. */
export function newId(prefix: string): string {
  const bytes = randomBytes(24);
  let s = '';
  for (const b of bytes) s += ALNUM[b % ALNUM.length];
  return `${prefix}_${s}`;
}

/** Stripe's error object for a status (an injected fault's answer, when it gives no body). */
export function defaultStripeError(status: number): StripeErrorBody {
  if (status === 401) {
    return { type: 'invalid_request_error', message: 'Invalid API Key provided: sk_test_***' };
  }
  if (status === 402) {
    return {
      type: 'card_error',
      code: 'card_declined',
      decline_code: 'generic_decline',
      message: 'Your card was declined.',
    };
  }
  if (status === 409) {
    return {
      type: 'invalid_request_error',
      code: 'idempotency_key_in_use',
      message:
        'There is currently another in-progress request using this Idempotent Key (that probably means you submitted twice, and the other request is still going through). Please try again later.',
    };
  }
  if (status === 429) {
    return {
      type: 'invalid_request_error',
      code: 'rate_limit',
      message: 'Too many requests hit the API too quickly.',
    };
  }
  if (status >= 500) {
    return { type: 'api_error', message: 'An unknown error occurred (injected by FakeStripe).' };
  }
  return { type: 'invalid_request_error', message: `Injected error (HTTP ${status}).` };
}
