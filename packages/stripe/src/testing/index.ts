/**
 * `@cyclone/stripe/testing`: a local fake of the Stripe v1 API subset (payment intents, refunds,
 * customers) with Stripe's idempotency semantics, the fault kinds of
 * `@cyclone/idempotency/testing` (plus `hold`), request recording and a count of real effects.
 * For tests only; it never reaches the network.
 */
export {
  FAKE_API_VERSION,
  FakeStripe,
  type FakeStripeOptions,
  STRIPE_IDEMPOTENCY_RETENTION_MS,
} from './fake-stripe.js';
export type {
  FaultHandle,
  RecordedRequest,
  RequestOutcome,
  StripeFault,
  StripeFaultOptions,
  StripeStatusFault,
} from './faults.js';
export { canonical, decodeForm, type FormParams, type FormValue } from './form.js';
export type {
  Effect,
  EffectType,
  StripeErrorBody,
  StripeObject,
} from './resources/objects.js';
export { DECLINING_PAYMENT_METHODS } from './resources/payment-intents.js';
export type { StripeRoute } from './resources/routes.js';
