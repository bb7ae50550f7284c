// Prelude of Stripe fragments that run inside a handler: `ctx`, the process's Stripe client, and
// values of the surrounding code.
import type * as cyclone from '@cyclone/core';
import { idempotentStripe } from '@cyclone/stripe';
import type Stripe from 'stripe';

declare const ctx: cyclone.Context;
declare const stripeClient: Stripe;
declare const email: string;
declare const pi: string;
void idempotentStripe;
