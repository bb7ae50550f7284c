/**
 * The Stripe v1 resources the fake serves (PROVIDERS.md § 5.1): payment intents, refunds and
 * customers, each with create, retrieve and list. Objects carry the fields adapters and apps
 * read (`id`, `object`, `amount`, `currency`, `status`, `metadata`, `created`, …); validation
 * follows Stripe's rules closely enough that a wrong call fails the way it would in production.
 */
import { randomBytes } from 'node:crypto';
import type { FormParams, FormValue } from './form.js';

/** The body of a Stripe error: `{ error: StripeErrorBody }` on the wire (PROVIDERS.md § 1.4). */
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
 * (PROVIDERS.md § 1.2: executed requests are stored, validation failures are not).
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

/** Payment methods that decline with `card_declined` (Stripe's test payment methods). */
export const DECLINING_PAYMENT_METHODS: ReadonlySet<string> = new Set([
  'pm_card_chargeDeclined',
  'pm_card_visa_chargeDeclined',
  'pm_card_chargeDeclinedInsufficientFunds',
]);

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

/** What one routed request produced. */
export interface RouteResult {
  status: number;
  body: unknown;
  effects: Omit<Effect, 'idempotencyKey' | 'requestSeq'>[];
}

/** Inputs of a routed request. */
export interface RouteInput {
  method: string;
  /** Path without the query, e.g. `/v1/payment_intents/pi_123`. */
  path: string;
  params: FormParams;
  /** The fake's clock, in Unix seconds. */
  nowSeconds: number;
}

const ALNUM = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';

/** A Stripe-looking id: `prefix_` + 24 alphanumerics. */
export function newId(prefix: string): string {
  const bytes = randomBytes(24);
  let s = '';
  for (const b of bytes) s += ALNUM[b % ALNUM.length];
  return `${prefix}_${s}`;
}

const invalid = (message: string, param?: string, code = 'parameter_invalid') =>
  new ApiFailure(400, { type: 'invalid_request_error', code, message, param }, false);

const missing = (param: string) =>
  invalid(`Missing required param: ${param}.`, param, 'parameter_missing');

const noSuch = (kind: string, id: string, param = 'id') =>
  new ApiFailure(
    404,
    {
      type: 'invalid_request_error',
      code: 'resource_missing',
      message: `No such ${kind}: '${id}'`,
      param,
    },
    false,
  );

function str(params: FormParams, name: string): string | undefined {
  const v = params[name];
  if (v === undefined) return undefined;
  if (typeof v !== 'string') throw invalid(`Invalid string: ${name}`, name);
  return v;
}

function int(params: FormParams, name: string): number | undefined {
  const v = str(params, name);
  if (v === undefined || v === '') return undefined;
  if (!/^-?\d+$/.test(v)) {
    throw invalid(`Invalid integer: ${v}`, name, 'parameter_invalid_integer');
  }
  return Number(v);
}

function bool(params: FormParams, name: string): boolean | undefined {
  const v = str(params, name);
  if (v === undefined || v === '') return undefined;
  if (v !== 'true' && v !== 'false') throw invalid(`Invalid boolean: ${v}`, name);
  return v === 'true';
}

/** Stripe's metadata limits: ≤ 50 keys, key ≤ 40 characters, value ≤ 500 characters. */
function metadata(params: FormParams): Record<string, string> {
  const v = params.metadata;
  if (v === undefined || v === '') return {};
  if (typeof v !== 'object' || Array.isArray(v)) throw invalid('Invalid hash', 'metadata');
  const out: Record<string, string> = {};
  const entries = Object.entries(v);
  if (entries.length > 50) {
    throw invalid('You can specify up to 50 keys in metadata.', 'metadata');
  }
  for (const [k, val] of entries) {
    if (typeof val !== 'string') throw invalid('Invalid metadata value', `metadata[${k}]`);
    if (k.length > 40) {
      throw invalid('Metadata keys can have a maximum length of 40 characters.', `metadata[${k}]`);
    }
    if (val.length > 500) {
      throw invalid(
        'Metadata values can have a maximum length of 500 characters.',
        `metadata[${k}]`,
      );
    }
    if (val !== '') out[k] = val;
  }
  return out;
}

function onlyKnown(params: FormParams, allowed: readonly string[]): void {
  for (const k of Object.keys(params)) {
    if (!allowed.includes(k)) {
      throw invalid(`Received unknown parameter: ${k}`, k, 'parameter_unknown');
    }
  }
}

const LIST_PARAMS = ['limit', 'starting_after', 'ending_before', 'created', 'expand'] as const;

/** Filters on `created` (`created=…` or `created[gte|gt|lte|lt]=…`, Unix seconds). */
function createdFilter(params: FormParams): (o: StripeObject) => boolean {
  const c = params.created;
  if (c === undefined) return () => true;
  if (typeof c === 'string') {
    if (!/^\d+$/.test(c)) throw invalid(`Invalid integer: ${c}`, 'created');
    const t = Number(c);
    return (o) => o.created === t;
  }
  if (Array.isArray(c)) throw invalid('Invalid hash', 'created');
  const bound = (op: string): number | undefined => {
    const v = c[op];
    if (v === undefined) return undefined;
    if (typeof v !== 'string' || !/^\d+$/.test(v)) {
      throw invalid(`Invalid integer: ${String(v)}`, `created[${op}]`);
    }
    return Number(v);
  };
  for (const k of Object.keys(c)) {
    if (!['gt', 'gte', 'lt', 'lte'].includes(k)) {
      throw invalid(
        `Received unknown parameter: created[${k}]`,
        `created[${k}]`,
        'parameter_unknown',
      );
    }
  }
  const gt = bound('gt');
  const gte = bound('gte');
  const lt = bound('lt');
  const lte = bound('lte');
  return (o) =>
    (gt === undefined || o.created > gt) &&
    (gte === undefined || o.created >= gte) &&
    (lt === undefined || o.created < lt) &&
    (lte === undefined || o.created <= lte);
}

/** A list page, newest first, with `limit` (1–100, default 10) and cursor pagination. */
function listPage(
  all: Map<string, StripeObject>,
  params: FormParams,
  url: string,
  filter: (o: StripeObject) => boolean,
): RouteResult {
  const limit = int(params, 'limit') ?? 10;
  if (limit < 1 || limit > 100) {
    throw invalid('This value must be between 1 and 100 (it currently is out of range).', 'limit');
  }
  const byCreated = createdFilter(params);
  // Map order is creation order; newest first means reversed.
  let items = [...all.values()].reverse().filter((o) => filter(o) && byCreated(o));
  const after = str(params, 'starting_after');
  const before = str(params, 'ending_before');
  if (after) {
    const i = items.findIndex((o) => o.id === after);
    if (i < 0)
      throw noSuch(url.split('/').pop()?.replace(/s$/, '') ?? 'object', after, 'starting_after');
    items = items.slice(i + 1);
  } else if (before) {
    const i = items.findIndex((o) => o.id === before);
    if (i < 0) throw noSuch('object', before, 'ending_before');
    items = items.slice(Math.max(0, i - limit), i);
    return {
      status: 200,
      body: { object: 'list', data: items, has_more: i - limit > 0, url },
      effects: [],
    };
  }
  const data = items.slice(0, limit);
  return {
    status: 200,
    body: { object: 'list', data, has_more: items.length > limit, url },
    effects: [],
  };
}

const PI_CREATE_PARAMS = [
  'amount',
  'currency',
  'customer',
  'description',
  'metadata',
  'payment_method',
  'payment_method_types',
  'confirm',
  'capture_method',
  'confirmation_method',
  'receipt_email',
  'statement_descriptor',
  'statement_descriptor_suffix',
  'setup_future_usage',
  'off_session',
  'return_url',
  'automatic_payment_methods',
  'shipping',
  'on_behalf_of',
  'transfer_data',
  'transfer_group',
  'application_fee_amount',
  'expand',
] as const;

function createPaymentIntent(store: ResourceStore, input: RouteInput): RouteResult {
  const p = input.params;
  onlyKnown(p, PI_CREATE_PARAMS);
  const amount = int(p, 'amount');
  if (amount === undefined) throw missing('amount');
  if (amount < 1) throw invalid('This value must be greater than or equal to 1.', 'amount');
  if (amount > 99_999_999) {
    throw invalid('Amount must be no more than $999,999.99', 'amount', 'amount_too_large');
  }
  const currency = str(p, 'currency');
  if (!currency) throw missing('currency');
  if (!/^[a-zA-Z]{3}$/.test(currency)) throw invalid(`Invalid currency: ${currency}`, 'currency');
  const customer = str(p, 'customer');
  if (customer && !store.customer.has(customer)) throw noSuch('customer', customer, 'customer');
  const meta = metadata(p);
  const paymentMethod = str(p, 'payment_method') || null;
  const confirm = bool(p, 'confirm') ?? false;
  const captureMethod = str(p, 'capture_method') ?? 'automatic_async';
  if (confirm && !paymentMethod) {
    throw invalid(
      'You cannot confirm this PaymentIntent because it has no payment method.',
      'payment_method',
      'payment_intent_unexpected_state',
    );
  }
  const pmTypes = p.payment_method_types;
  const id = newId('pi');
  const pi: StripeObject = {
    id,
    object: 'payment_intent',
    amount,
    amount_capturable: 0,
    amount_received: 0,
    capture_method: captureMethod,
    client_secret: `${id}_secret_${newId('s').slice(2)}`,
    confirmation_method: 'automatic',
    created: input.nowSeconds,
    currency: currency.toLowerCase(),
    customer: customer ?? null,
    description: str(p, 'description') ?? null,
    last_payment_error: null,
    latest_charge: null,
    livemode: false,
    metadata: meta,
    payment_method: paymentMethod,
    payment_method_types: Array.isArray(pmTypes) ? pmTypes : ['card'],
    receipt_email: str(p, 'receipt_email') ?? null,
    status: paymentMethod ? 'requires_confirmation' : 'requires_payment_method',
  };
  const effects: RouteResult['effects'] = [{ type: 'payment_intent', id }];
  if (confirm && paymentMethod) {
    if (DECLINING_PAYMENT_METHODS.has(paymentMethod)) {
      const declineCode = paymentMethod.endsWith('InsufficientFunds')
        ? 'insufficient_funds'
        : 'generic_decline';
      const lastError = {
        type: 'card_error',
        code: 'card_declined',
        decline_code: declineCode,
        message: 'Your card was declined.',
      };
      Object.assign(pi, {
        status: 'requires_payment_method',
        payment_method: null,
        last_payment_error: lastError,
      });
      store.payment_intent.set(id, pi);
      // An executed request: Stripe stores this 402 under the key (PROVIDERS.md § 1.2).
      throw Object.assign(
        new ApiFailure(
          402,
          {
            ...lastError,
            doc_url: 'https://stripe.com/docs/error-codes/card-declined',
            payment_intent: pi,
          },
          true,
        ),
        { effects },
      );
    }
    const chargeId = newId('ch');
    Object.assign(pi, {
      latest_charge: chargeId,
      status: captureMethod === 'manual' ? 'requires_capture' : 'succeeded',
      amount_received: captureMethod === 'manual' ? 0 : amount,
      amount_capturable: captureMethod === 'manual' ? amount : 0,
    });
    effects.push({ type: 'charge', id: chargeId });
  }
  store.payment_intent.set(id, pi);
  return { status: 200, body: pi, effects };
}

const REFUND_CREATE_PARAMS = [
  'payment_intent',
  'charge',
  'amount',
  'reason',
  'metadata',
  'expand',
  'instructions_email',
  'refund_application_fee',
  'reverse_transfer',
] as const;

function createRefund(store: ResourceStore, input: RouteInput): RouteResult {
  const p = input.params;
  onlyKnown(p, REFUND_CREATE_PARAMS);
  const piId = str(p, 'payment_intent');
  const chargeId = str(p, 'charge');
  if (!piId && !chargeId) {
    throw invalid(
      'One of the following params should be provided for this request: payment_intent or charge.',
      'payment_intent',
      'parameter_missing',
    );
  }
  let pi: StripeObject | undefined;
  if (piId) {
    pi = store.payment_intent.get(piId);
    if (!pi) throw noSuch('payment_intent', piId, 'payment_intent');
  } else {
    pi = [...store.payment_intent.values()].find((x) => x.latest_charge === chargeId);
    if (!pi) throw noSuch('charge', chargeId as string, 'charge');
  }
  const reason = str(p, 'reason');
  if (reason && !['duplicate', 'fraudulent', 'requested_by_customer'].includes(reason)) {
    throw invalid(`Invalid reason: ${reason}`, 'reason');
  }
  const meta = metadata(p);
  if (pi.status !== 'succeeded') {
    throw new ApiFailure(
      400,
      {
        type: 'invalid_request_error',
        code: 'charge_not_refundable',
        message: `This PaymentIntent (${pi.id}) does not have a successful charge to refund.`,
        param: 'payment_intent',
      },
      true,
    );
  }
  const received = Number(pi.amount_received);
  const already = store.refunded.get(pi.id) ?? 0;
  const remaining = received - already;
  const amount = int(p, 'amount') ?? remaining;
  if (remaining <= 0) {
    throw new ApiFailure(
      400,
      {
        type: 'invalid_request_error',
        code: 'charge_already_refunded',
        message: `Charge ${String(pi.latest_charge)} has already been refunded.`,
      },
      true,
    );
  }
  if (amount < 1 || amount > remaining) {
    throw new ApiFailure(
      400,
      {
        type: 'invalid_request_error',
        code: 'amount_too_large',
        message: `Refund amount (${amount}) is greater than unrefunded amount on charge (${remaining})`,
        param: 'amount',
      },
      true,
    );
  }
  store.refunded.set(pi.id, already + amount);
  const id = newId('re');
  const refund: StripeObject = {
    id,
    object: 'refund',
    amount,
    charge: pi.latest_charge,
    created: input.nowSeconds,
    currency: pi.currency,
    metadata: meta,
    payment_intent: pi.id,
    reason: reason ?? null,
    status: 'succeeded',
  };
  store.refund.set(id, refund);
  return { status: 200, body: refund, effects: [{ type: 'refund', id }] };
}

const CUSTOMER_CREATE_PARAMS = [
  'email',
  'name',
  'description',
  'metadata',
  'phone',
  'payment_method',
  'address',
  'shipping',
  'invoice_settings',
  'preferred_locales',
  'expand',
] as const;

function createCustomer(store: ResourceStore, input: RouteInput): RouteResult {
  const p = input.params;
  onlyKnown(p, CUSTOMER_CREATE_PARAMS);
  const email = str(p, 'email');
  if (email !== undefined && email.length > 512) {
    throw invalid('Invalid email address', 'email', 'email_invalid');
  }
  const id = newId('cus');
  const customer: StripeObject = {
    id,
    object: 'customer',
    address: (p.address as FormValue | undefined) ?? null,
    created: input.nowSeconds,
    description: str(p, 'description') ?? null,
    email: email ?? null,
    invoice_prefix: id.slice(4, 12).toUpperCase(),
    livemode: false,
    metadata: metadata(p),
    name: str(p, 'name') ?? null,
    phone: str(p, 'phone') ?? null,
  };
  store.customer.set(id, customer);
  return { status: 200, body: customer, effects: [{ type: 'customer', id }] };
}

/** Routes of the subset: `[method, pattern, handler]`. */
type Handler = (store: ResourceStore, input: RouteInput, match: RegExpMatchArray) => RouteResult;

const retrieve =
  (kind: keyof Omit<ResourceStore, 'refunded'>): Handler =>
  (store, input, m) => {
    onlyKnown(input.params, ['expand']);
    const id = decodeURIComponent(m[1] ?? '');
    const o = store[kind].get(id);
    if (!o) throw noSuch(kind, id);
    return { status: 200, body: o, effects: [] };
  };

const ROUTES: [string, RegExp, Handler][] = [
  ['POST', /^\/v1\/payment_intents$/, (s, i) => createPaymentIntent(s, i)],
  ['GET', /^\/v1\/payment_intents\/([^/]+)$/, retrieve('payment_intent')],
  [
    'GET',
    /^\/v1\/payment_intents$/,
    (s, i) => {
      onlyKnown(i.params, [...LIST_PARAMS, 'customer']);
      const customer = str(i.params, 'customer');
      return listPage(s.payment_intent, i.params, '/v1/payment_intents', (o) =>
        customer ? o.customer === customer : true,
      );
    },
  ],
  ['POST', /^\/v1\/refunds$/, (s, i) => createRefund(s, i)],
  ['GET', /^\/v1\/refunds\/([^/]+)$/, retrieve('refund')],
  [
    'GET',
    /^\/v1\/refunds$/,
    (s, i) => {
      onlyKnown(i.params, [...LIST_PARAMS, 'payment_intent', 'charge']);
      const pi = str(i.params, 'payment_intent');
      const ch = str(i.params, 'charge');
      return listPage(
        s.refund,
        i.params,
        '/v1/refunds',
        (o) => (!pi || o.payment_intent === pi) && (!ch || o.charge === ch),
      );
    },
  ],
  ['POST', /^\/v1\/customers$/, (s, i) => createCustomer(s, i)],
  ['GET', /^\/v1\/customers\/([^/]+)$/, retrieve('customer')],
  [
    'GET',
    /^\/v1\/customers$/,
    (s, i) => {
      onlyKnown(i.params, [...LIST_PARAMS, 'email']);
      const email = str(i.params, 'email');
      return listPage(s.customer, i.params, '/v1/customers', (o) => !email || o.email === email);
    },
  ],
];

/**
 * Runs one request against the store.
 * @throws ApiFailure for every Stripe error (404 `Unrecognized request URL` for paths outside the
 *   subset). A thrown failure may carry `effects` (a declined payment intent still exists).
 */
export function route(store: ResourceStore, input: RouteInput): RouteResult {
  for (const [method, re, handler] of ROUTES) {
    if (method !== input.method) continue;
    const m = input.path.match(re);
    if (m) return handler(store, input, m);
  }
  throw new ApiFailure(
    404,
    {
      type: 'invalid_request_error',
      message: `Unrecognized request URL (${input.method}: ${input.path}). The Stripe fake of @cyclone/stripe/testing serves payment intents, refunds and customers (create, retrieve, list).`,
    },
    false,
  );
}
