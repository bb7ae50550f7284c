/**
 * A hard deadline on every request of a `twilio` client: its `RequestClient`'s axios instance
 * gets `@cyclone/idempotency`'s `deadlineAgent`s (http and https) with the client's own timeout,
 * once per `RequestClient`. The SDK's timeout (axios', the agent's socket timeout) starts only
 * once a socket has connected, so a connect whose SYN is dropped (a partition) would wait for the
 * kernel's SYN retries and send the message after the heal; past the deadline the socket is reset
 * instead, so no byte of a request reaches Twilio later than the timeout after it was made.
 */
import * as https from 'node:https';
import { deadlineAgent } from '@cyclone/idempotency';

const INSTALLED = Symbol.for('cyclone.twilio.deadline');

/** The part of a `RequestClient` this module reads and changes. */
interface RequestClientLike {
  defaultTimeout?: number;
  keepAlive?: boolean;
  axios?: { defaults?: { httpAgent?: unknown; httpsAgent?: unknown } };
  [INSTALLED]?: number;
}

/**
 * Installs the deadline agents on `client.httpClient` (once) and returns the deadline in ms, or
 * undefined when the client cannot take them: no axios-based `RequestClient` (a custom
 * `httpClient`), or one whose https agent is not Node's own (`HTTP_PROXY` set: the SDK's proxy
 * agent is kept, and its requests have no hard deadline).
 */
export function installDeadline(client: object): number | undefined {
  let h: RequestClientLike | undefined;
  try {
    h = (client as { httpClient?: RequestClientLike }).httpClient;
  } catch {
    return undefined;
  }
  if (typeof h !== 'object' || h === null) return undefined;
  if (h[INSTALLED] !== undefined) return h[INSTALLED];
  const defaults = h.axios?.defaults;
  if (!defaults) return undefined;
  const current = defaults.httpsAgent as { options?: https.AgentOptions } | undefined;
  const ctor: unknown = current?.constructor;
  const sdkOptions = current?.options;
  if (current !== undefined && ctor !== https.Agent) return undefined;
  const ms = h.defaultTimeout ?? 30_000;
  const keepAlive = h.keepAlive !== false;
  // The SDK's agent options (CA bundle, socket limits) carry over to the https agent.
  defaults.httpsAgent = deadlineAgent('https:', ms, { keepAlive, tls: sdkOptions });
  defaults.httpAgent = deadlineAgent('http:', ms, { keepAlive });
  try {
    Object.defineProperty(h, INSTALLED, { value: ms });
  } catch {
    // a frozen RequestClient: installed again on the next call, harmlessly
  }
  return ms;
}
