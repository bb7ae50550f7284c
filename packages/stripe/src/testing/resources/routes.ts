/**
 * The route table of the fake: the Stripe v1 subset it serves (payment intents, refunds and
 * customers, each with create, retrieve and list), by name and by request.
 */
import { customers } from './customers.js';
import { ApiFailure, type ResourceStore } from './objects.js';
import { paymentIntents } from './payment-intents.js';
import { refunds } from './refunds.js';
import type { Route, RouteInput, RouteResult } from './resource.js';

const ROUTES = [...paymentIntents, ...refunds, ...customers];

/** A route of the fake, e.g. `payment_intents.create` (fault targeting, `RecordedRequest.route`). */
export type StripeRoute = (typeof ROUTES)[number]['name'];

function find(method: string, path: string): [Route<StripeRoute>, RegExpMatchArray] | undefined {
  for (const r of ROUTES) {
    if (r.method !== method) continue;
    const m = path.match(r.pattern);
    if (m) return [r, m];
  }
  return undefined;
}

/** The route of a request, or `unknown` for one outside the subset. */
export function routeNameOf(method: string, path: string): StripeRoute | 'unknown' {
  return find(method, path)?.[0].name ?? 'unknown';
}

/**
 * Runs one request against the store.
 * @throws ApiFailure for every Stripe error (404 `Unrecognized request URL` for paths outside the
 *   subset). A thrown failure may carry `effects` (a declined payment intent still exists).
 */
export function route(store: ResourceStore, input: RouteInput): RouteResult {
  const found = find(input.method, input.path);
  if (found) return found[0].handler(store, input, found[1]);
  throw new ApiFailure(
    404,
    {
      type: 'invalid_request_error',
      message: `Unrecognized request URL (${input.method}: ${input.path}). The Stripe fake of @cyclone/stripe/testing serves payment intents, refunds and customers (create, retrieve, list).`,
    },
    false,
  );
}
