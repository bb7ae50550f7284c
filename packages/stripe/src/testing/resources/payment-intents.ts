/**
 * Payment intents (`/v1/payment_intents`): create (optionally confirmed: a charge, or a decline
 * with Stripe's test payment methods), retrieve, list by customer.
 */
import { ApiFailure, newId, type ResourceStore, type StripeObject } from './objects.js';
import { bool, int, invalid, metadata, missing, noSuch, str } from './params.js';
import {
  type CreatedObject,
  defineResource,
  type RouteInput,
  type RouteResult,
} from './resource.js';

/** Payment methods that decline with `card_declined` (Stripe's test payment methods). */
export const DECLINING_PAYMENT_METHODS: ReadonlySet<string> = new Set([
  'pm_card_chargeDeclined',
  'pm_card_visa_chargeDeclined',
  'pm_card_chargeDeclinedInsufficientFunds',
]);

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

/** A payment intent; `confirm` with a payment method charges it, or declines (a stored 402). */
function createPaymentIntent(store: ResourceStore, input: RouteInput): CreatedObject {
  const p = input.params;
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
  const effects: RouteResult['effects'] = [];
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
      // An executed request: Stripe stores this 402 under the key.
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
        { effects: [{ type: 'payment_intent', id }] },
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
  return { object: pi, effects };
}

/** The routes `payment_intents.create`, `.retrieve` and `.list`. */
export const paymentIntents = defineResource({
  collection: 'payment_intents',
  kind: 'payment_intent',
  createParams: PI_CREATE_PARAMS,
  create: createPaymentIntent,
  listParams: ['customer'],
  listFilter: (params) => {
    const customer = str(params, 'customer');
    return (o) => (customer ? o.customer === customer : true);
  },
});
