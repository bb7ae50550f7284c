/**
 * The response headers of one guarded `messages.create`. The SDK's `RestException` and
 * `TwilioServiceException` keep only the status and the body, so a 429's `Retry-After` would be
 * lost by the time the adapter classifies the error. The client's `RequestClient` is wrapped
 * once per instance: each response's headers go to the adapter call it belongs to, found through
 * `AsyncLocalStorage` (exact with concurrent calls on one client, unlike its `lastResponse`);
 * outside an adapter call the wrapper only passes the call through.
 */
import { AsyncLocalStorage } from 'node:async_hooks';

/** Where one adapter call's response headers land. */
export interface SeenResponse {
  /** The headers of the last response of the call (after the SDK's own 429 retries). */
  headers?: unknown;
}

const current = new AsyncLocalStorage<SeenResponse>();
const TAPPED = Symbol.for('cyclone.twilio.responseHeaders');

type Request = (this: unknown, ...args: unknown[]) => unknown;

/** Wraps `client.httpClient.request` once; a client that cannot be wrapped is left as it is. */
function tap(client: object): void {
  let http: unknown;
  try {
    http = (client as { httpClient?: unknown }).httpClient;
  } catch {
    return;
  }
  if (typeof http !== 'object' || http === null) return;
  const h = http as { request?: unknown; [TAPPED]?: true };
  if (h[TAPPED] || typeof h.request !== 'function') return;
  const original = h.request as Request;
  const request: Request = function (this: unknown, ...args: unknown[]) {
    const seen = current.getStore();
    const answer = original.apply(this, args);
    if (!seen || typeof (answer as Promise<unknown> | null)?.then !== 'function') return answer;
    return (answer as Promise<{ headers?: unknown } | undefined>).then((res) => {
      seen.headers = res?.headers;
      return res;
    });
  };
  try {
    Object.defineProperty(h, 'request', { value: request, writable: true, configurable: true });
    Object.defineProperty(h, TAPPED, { value: true });
  } catch {
    // A frozen client: its 429s are snoozed by the backoff, not by their headers.
  }
}

/**
 * Runs `fn` (one SDK call on `client`) and records the headers of its response in `seen`.
 */
export function withResponseHeaders<T>(
  client: object,
  seen: SeenResponse,
  fn: () => Promise<T>,
): Promise<T> {
  tap(client);
  return current.run(seen, fn);
}
