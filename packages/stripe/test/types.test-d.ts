/**
 * Type test (checked by `tsc` in `pnpm typecheck` and by vitest's typecheck mode): the wrapped
 * client has exactly the `Stripe` client's types: same resources, same parameters, same
 * responses, same request options.
 */
import type { Context } from '@cyclone/core';
import type Stripe from 'stripe';
import { describe, expectTypeOf, it } from 'vitest';
import { type IdempotentStripeOptions, idempotentStripe } from '../src/index.js';

declare const stripe: Stripe;
declare const ctx: Context;

describe('idempotentStripe types', () => {
  it('returns the Stripe type itself', () => {
    const wrapped = idempotentStripe(stripe, ctx);
    expectTypeOf(wrapped).toEqualTypeOf<Stripe>();
    expectTypeOf(idempotentStripe(stripe, ctx, { scope: 'refund' })).toEqualTypeOf<Stripe>();
  });

  it('keeps every method signature of the SDK', () => {
    const s = idempotentStripe(stripe, ctx);
    expectTypeOf(s.paymentIntents.create).toEqualTypeOf<Stripe['paymentIntents']['create']>();
    expectTypeOf(s.paymentIntents.create).parameters.toEqualTypeOf<
      [Stripe.PaymentIntentCreateParams, Stripe.RequestOptions?]
    >();
    expectTypeOf(s.paymentIntents.create).returns.resolves.toEqualTypeOf<
      Stripe.Response<Stripe.PaymentIntent>
    >();
    expectTypeOf(s.refunds.create).toEqualTypeOf<Stripe['refunds']['create']>();
    expectTypeOf(s.customers.create).toEqualTypeOf<Stripe['customers']['create']>();
    expectTypeOf(s.customers.list).toEqualTypeOf<Stripe['customers']['list']>();
    expectTypeOf(s.paymentIntents.retrieve).toEqualTypeOf<Stripe['paymentIntents']['retrieve']>();
    expectTypeOf(s.billing.meters).toEqualTypeOf<Stripe['billing']['meters']>();
    expectTypeOf(s.rawRequest).toEqualTypeOf<Stripe['rawRequest']>();
  });

  it('rejects what the SDK rejects', () => {
    const s = idempotentStripe(stripe, ctx);
    // @ts-expect-error amount is a number
    void s.paymentIntents.create({ amount: '12', currency: 'usd' });
    // @ts-expect-error unknown request option
    void s.paymentIntents.create({ amount: 12, currency: 'usd' }, { scope: 'x' });
    // @ts-expect-error not a Stripe client
    idempotentStripe({}, ctx);
  });

  it('has typed options', () => {
    expectTypeOf<IdempotentStripeOptions['onUnknown']>().toEqualTypeOf<
      | 'reconcile'
      | 'recall'
      | 'fail'
      | ((key: string, info: import('@cyclone/idempotency').ReconcileInfo) => Promise<unknown>)
      | undefined
    >();
  });
});
