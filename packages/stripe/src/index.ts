/**
 * `@cyclone/stripe`: the official Stripe SDK for Cyclone handlers, with automatic, stable
 * idempotency keys and the durable ledger guard of `@cyclone/idempotency` around every mutating
 * call. The fake Stripe API for tests is `@cyclone/stripe/testing`.
 */
export { classifyStripeError } from './classify.js';
export { installDeadline } from './deadline.js';
export {
  DEFAULT_REPLAY_WINDOW_MS,
  type IdempotentStripeOptions,
  idempotentStripe,
  type StripeUnknownPolicy,
} from './idempotent-stripe.js';
export { MAX_STRIPE_KEY_LENGTH, METADATA_KEYS } from './keys.js';
export { METADATA_COLLECTIONS, RECONCILABLE_COLLECTIONS } from './reconcile.js';
