/**
 * Building a `MailService` that is safe for the adapter and for tests: its own `Client` (never the
 * process-wide singletons), `setApiKey` before `baseUrl` (setApiKey resets the base URL), and a
 * request timeout (the SDK has none by default, so an unbounded call could outlive the step's
 * lease), enforced as a hard deadline over the whole request by `@cyclone/idempotency`'s
 * `deadlineAgent`: axios' own timeout starts only once connected, so a connect whose SYN is
 * dropped (a partition) would otherwise wait for the kernel's SYN retries and send the mail after
 * the heal. Past the deadline the socket is reset, so no byte of the request reaches SendGrid
 * later than `timeoutMs` after the send started.
 */
import { deadlineAgent } from '@cyclone/idempotency';
import { Client } from '@sendgrid/client';
import { MailService } from '@sendgrid/mail';

/** Default request timeout of `createMailService`, in ms. Keep it well below the step lease. */
export const DEFAULT_MAIL_TIMEOUT_MS = 10_000;

/** Options of `createMailService`. */
export interface MailServiceOptions {
  /** The SendGrid API key (`SG.…`; the SDK warns on other prefixes). */
  apiKey: string;
  /**
   * Base URL of the API, e.g. a local fake's `http://127.0.0.1:PORT/`. Default: the SDK's
   * (`https://api.sendgrid.com/`). Applied after the API key, which would otherwise reset it.
   */
  baseUrl?: string;
  /**
   * Request timeout in ms, a hard deadline from the request's start (DNS, connect, TLS, the
   * response read whole). Default `DEFAULT_MAIL_TIMEOUT_MS` (10,000).
   */
  timeoutMs?: number;
}

/**
 * A new `MailService` with its own `Client`, configured in the order the SDK needs.
 * @throws RangeError when `timeoutMs` is not a positive integer.
 */
export function createMailService(options: MailServiceOptions): MailService {
  const timeoutMs = options.timeoutMs ?? DEFAULT_MAIL_TIMEOUT_MS;
  if (!Number.isInteger(timeoutMs) || timeoutMs <= 0) {
    throw new RangeError(`timeoutMs must be a positive integer (ms), got ${timeoutMs}`);
  }
  const client = new Client();
  client.setApiKey(options.apiKey);
  if (options.baseUrl) client.setDefaultRequest('baseUrl', options.baseUrl);
  // axios takes the agent matching the URL's protocol.
  client.setDefaultRequest({
    httpAgent: deadlineAgent('http:', timeoutMs),
    httpsAgent: deadlineAgent('https:', timeoutMs),
  } as never);
  const mail = new MailService();
  mail.setClient(client);
  mail.setTimeout(timeoutMs);
  return mail;
}
