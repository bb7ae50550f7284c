/**
 * `@cyclone/stripe/testing`: a local fake of the Stripe v1 API subset (payment intents, refunds,
 * customers) with Stripe's idempotency semantics, fault injection, request recording and a
 * count of real effects (PROVIDERS.md § 5.1). For tests only; it never reaches the network.
 */
export {
  FAKE_API_VERSION,
  FakeStripe,
  type FakeStripeOptions,
  type Fault,
  type FaultHandle,
  type FaultMatch,
  type FaultRule,
  type RecordedRequest,
  type RequestOutcome,
  STRIPE_IDEMPOTENCY_RETENTION_MS,
} from './fake-stripe.js';
export { canonical, decodeForm, type FormParams, type FormValue } from './form.js';
export type { Effect, EffectType, StripeErrorBody, StripeObject } from './resources/objects.js';
export { DECLINING_PAYMENT_METHODS } from './resources/payment-intents.js';
