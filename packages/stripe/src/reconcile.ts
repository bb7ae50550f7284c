/**
 * The evidence that settles an unknown outcome past Stripe's key window (this adapter's
 * reconciliation source, as `reconcile.ts` is in each adapter): list the objects of the call's
 * collection created since the call started, and look for our marker `metadata.cyclone_key`.
 * Lists are strongly consistent (unlike Search, which may lag by up to an hour), so "not found"
 * means "not created".
 */
import { METADATA_KEYS } from './keys.js';

/**
 * Collections whose create call takes `metadata` (the adapter adds its marker there, so a lost
 * object can be found by it). A POST to any other path gets no metadata.
 */
export const METADATA_COLLECTIONS: ReadonlySet<string> = new Set([
  '/v1/charges',
  '/v1/checkout/sessions',
  '/v1/coupons',
  '/v1/credit_notes',
  '/v1/customers',
  '/v1/invoiceitems',
  '/v1/invoices',
  '/v1/payment_intents',
  '/v1/payment_links',
  '/v1/payouts',
  '/v1/plans',
  '/v1/prices',
  '/v1/products',
  '/v1/promotion_codes',
  '/v1/quotes',
  '/v1/refunds',
  '/v1/setup_intents',
  '/v1/subscription_schedules',
  '/v1/subscriptions',
  '/v1/tax_rates',
  '/v1/topups',
  '/v1/transfers',
]);

/**
 * Collections that take the marker on create and can be listed with `created[gte]`: a lost
 * create there can be reconciled after Stripe's 24 h window.
 */
export const RECONCILABLE_COLLECTIONS: ReadonlySet<string> = new Set([
  '/v1/charges',
  '/v1/checkout/sessions',
  '/v1/coupons',
  '/v1/credit_notes',
  '/v1/customers',
  '/v1/invoiceitems',
  '/v1/invoices',
  '/v1/payment_intents',
  '/v1/payouts',
  '/v1/plans',
  '/v1/prices',
  '/v1/products',
  '/v1/promotion_codes',
  '/v1/refunds',
  '/v1/setup_intents',
  '/v1/subscription_schedules',
  '/v1/subscriptions',
  '/v1/tax_rates',
  '/v1/topups',
  '/v1/transfers',
]);

/** Slack subtracted from the call's start for clock skew between us and Stripe: 5 min, in s. */
export const RECONCILE_SKEW_SECONDS = 300;

/** Most pages one reconciliation reads (100 objects each) before giving up. */
export const RECONCILE_MAX_PAGES = 50;

/** A GET through the SDK (the real client's `rawRequest`). */
export type RawGet = (path: string) => Promise<unknown>;

/** What the lookup found. */
export type LookupResult =
  | { found: 'none' }
  | { found: 'one'; object: Record<string, unknown> }
  | { found: 'many'; ids: string[] }
  | { found: 'too_many' };

interface ListPage {
  data?: Record<string, unknown>[];
  has_more?: boolean;
}

/**
 * Lists `collection` from `since` (Unix seconds, minus `RECONCILE_SKEW_SECONDS`), newest first,
 * and returns the objects whose `metadata.cyclone_key` equals `stripeKey`.
 * @param get sends a GET through the Stripe client (errors propagate: the caller retries).
 */
export async function findByMarker(
  get: RawGet,
  collection: string,
  stripeKey: string,
  since: number,
): Promise<LookupResult> {
  const gte = Math.max(0, Math.floor(since) - RECONCILE_SKEW_SECONDS);
  const hits: Record<string, unknown>[] = [];
  let after: string | undefined;
  for (let page = 0; page < RECONCILE_MAX_PAGES; page++) {
    const q = `created[gte]=${gte}&limit=100${after ? `&starting_after=${encodeURIComponent(after)}` : ''}`;
    const list = (await get(`${collection}?${q}`)) as ListPage;
    const data = Array.isArray(list?.data) ? list.data : [];
    for (const o of data) {
      const meta = o.metadata as Record<string, unknown> | undefined;
      if (meta?.[METADATA_KEYS.key] === stripeKey) hits.push(o);
    }
    const last = data[data.length - 1];
    if (!list?.has_more || !last || typeof last.id !== 'string') {
      if (hits.length === 0) return { found: 'none' };
      if (hits.length === 1) return { found: 'one', object: hits[0] as Record<string, unknown> };
      return { found: 'many', ids: hits.map((h) => String(h.id)) };
    }
    after = last.id;
  }
  return { found: 'too_many' };
}

/**
 * The decline recorded on an object a confirming create left behind: a payment intent (or setup
 * intent) created with `confirm: true` whose confirmation failed is still created, with status
 * `requires_payment_method` and its error in `last_payment_error` (`last_setup_error`), while
 * the create itself answered 402. Such an object found by its marker is the trace of a failed
 * call, not its result.
 * @param collection the create's collection (`/v1/payment_intents`).
 * @param params the create's parameters (only `confirm` is read).
 * @param object the object the marker lookup found.
 * @returns the error's `code` (`card_declined`), `decline_code` and `message` when the object
 *   records a failed confirmation of this create; undefined otherwise.
 */
export function failedConfirmation(
  collection: string,
  params: Record<string, unknown>,
  object: Record<string, unknown>,
): { code: string | undefined; declineCode: string | undefined; message: string } | undefined {
  if (params.confirm !== true && params.confirm !== 'true') return undefined;
  const field =
    collection === '/v1/payment_intents'
      ? 'last_payment_error'
      : collection === '/v1/setup_intents'
        ? 'last_setup_error'
        : undefined;
  if (field === undefined || object.status !== 'requires_payment_method') return undefined;
  const error = object[field] as Record<string, unknown> | null | undefined;
  if (error === null || typeof error !== 'object') return undefined;
  const str = (v: unknown) => (typeof v === 'string' ? v : undefined);
  return {
    code: str(error.code),
    declineCode: str(error.decline_code),
    message: str(error.message) ?? 'the confirmation failed',
  };
}
