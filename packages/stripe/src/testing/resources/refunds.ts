/**
 * Refunds (`/v1/refunds`): create against a succeeded payment intent or its charge, retrieve,
 * list by payment intent or charge.
 */
import { ApiFailure, newId, type ResourceStore, type StripeObject } from './objects.js';
import { int, invalid, metadata, noSuch, str } from './params.js';
import { type CreatedObject, defineResource, type RouteInput } from './resource.js';

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

/** A refund of a succeeded payment intent (or its charge), bounded by what is left to refund. */
function createRefund(store: ResourceStore, input: RouteInput): CreatedObject {
  const p = input.params;
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
  return { object: refund };
}

/** The routes `refunds.create`, `.retrieve` and `.list`. */
export const refunds = defineResource({
  collection: 'refunds',
  kind: 'refund',
  createParams: REFUND_CREATE_PARAMS,
  create: createRefund,
  listParams: ['payment_intent', 'charge'],
  listFilter: (params) => {
    const pi = str(params, 'payment_intent');
    const ch = str(params, 'charge');
    return (o) => (!pi || o.payment_intent === pi) && (!ch || o.charge === ch);
  },
});
