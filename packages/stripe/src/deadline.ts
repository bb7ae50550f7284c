/**
 * A hard deadline on every request of a `stripe` client: its Node HTTP client is replaced (once
 * per client) by one that sends each request through `@cyclone/idempotency`'s `deadlineAgent`
 * with that request's own timeout (`RequestOptions.timeout`, else the client's). stripe-node's
 * timeout is `ClientRequest.setTimeout`, an idle timer that a destroy ends by closing the socket:
 * Linux keeps retransmitting the unsent bytes of a closed socket, so a request written during a
 * partition could still reach Stripe after the timeout; past the deadline the socket is reset
 * instead, and no byte of a request reaches Stripe later than its timeout after it was made.
 *
 * Stripe deduplicates a late request by its idempotency key for 24 h, so this bounds when an
 * effect can appear rather than preventing a duplicate; the adapter's quiet period stays 0.
 */
import { deadlineAgent } from '@cyclone/idempotency';
import type Stripe from 'stripe';

const INSTALLED = Symbol.for('cyclone.stripe.deadline');

/** The part of stripe-node's `HttpClient` used here. */
interface HttpClientLike {
  getClientName(): string;
  makeRequest(
    host: string,
    port: string | number,
    path: string,
    method: string,
    headers: object,
    requestData: unknown,
    protocol: string,
    timeout: number,
  ): Promise<unknown>;
  [INSTALLED]?: true;
}

type NodeHttpClientClass = new (agent: unknown) => HttpClientLike;

/**
 * Replaces `stripe`'s HTTP client by the deadline one, once, and returns true; false (the client
 * left as it is) when it does not use stripe-node's own Node HTTP client (a custom `httpClient`,
 * a `httpAgent` of the caller's, e.g. a proxy: its requests keep the SDK's timeout only) or the
 * SDK has no `getApiField`/`_setApiField` (the SDK's documented, if unstable, accessors).
 */
export function installDeadline(stripe: Stripe): boolean {
  const s = stripe as unknown as {
    getApiField?: (k: string) => unknown;
    _setApiField?: (k: string, v: unknown) => void;
  };
  if (typeof s.getApiField !== 'function' || typeof s._setApiField !== 'function') return false;
  const current = s.getApiField('httpClient') as HttpClientLike | undefined;
  if (current?.[INSTALLED]) return true;
  if (!current) return false;
  if (current.getClientName?.() !== 'node' || s.getApiField('agent')) return false;
  const NodeHttpClient = current.constructor as NodeHttpClientClass;
  // One SDK client per protocol and timeout, each with its agent: the deadline is the timeout.
  const clients = new Map<string, HttpClientLike>();
  const deadlineClient: HttpClientLike = {
    getClientName: () => 'node',
    makeRequest(host, port, path, method, headers, requestData, protocol, timeout) {
      const proto = protocol === 'http' ? 'http:' : 'https:';
      const k = `${proto}${timeout}`;
      let c = clients.get(k);
      if (!c) {
        c = new NodeHttpClient(deadlineAgent(proto, timeout));
        clients.set(k, c);
      }
      return c.makeRequest(host, port, path, method, headers, requestData, protocol, timeout);
    },
    [INSTALLED]: true,
  };
  s._setApiField('httpClient', deadlineClient);
  return true;
}
