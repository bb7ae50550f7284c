/**
 * A local fake of SendGrid's v3 Mail Send API: `POST /v3/mail/send` on 127.0.0.1, answering like
 * SendGrid (202 + `X-Message-Id`, or `{ errors: [...] }`), counting the e-mails it "sent", and
 * emulating the Event Webhook by POSTing signed `processed` / `delivered` events (with the
 * message's `custom_args` as top-level keys) to your handler.
 */
import { createSign, generateKeyPairSync, type KeyObject, randomBytes } from 'node:crypto';
import {
  type Exchange,
  LoopbackFake,
  type RecordedRequest,
  type RouteResponse,
  runWithFault,
} from '@cyclone/idempotency/testing';
import type { MailService } from '@sendgrid/mail';
import { createMailService } from '../mail-service.js';

/** Routes of the fake, for fault targeting. */
export type SendGridRoute = 'send';

/** One e-mail request the fake accepted: an effect. */
export interface AcceptedMail {
  /** The `X-Message-Id` answered (22 characters, base64url). */
  messageId: string;
  /** Every recipient (to, cc, bcc) over all personalizations, in order. */
  recipients: string[];
  /** The top-level subject, if any. */
  subject: string | undefined;
  /** The top-level `custom_args` (string values), `{}` when none. */
  customArgs: Record<string, string>;
  /** The JSON body as received (snake_case, as the SDK serialises it). */
  body: Record<string, unknown>;
  /** The request that carried it. */
  request: RecordedRequest;
  at: Date;
}

/** One Event Webhook event (https://www.twilio.com/docs/sendgrid/for-developers/tracking-events/event). */
export interface SendGridEvent {
  email: string;
  /** Unix seconds. */
  timestamp: number;
  event: string;
  sg_event_id: string;
  /** `<X-Message-Id>.<filter suffix>`: begins with the request's X-Message-Id. */
  sg_message_id: string;
  'smtp-id': string;
  category?: string[];
  /** custom_args come back as extra top-level keys. */
  [customArg: string]: unknown;
}

/** Options of `FakeSendGrid.start`. */
export interface FakeSendGridOptions {
  /** The API key the fake accepts (`Authorization: Bearer <key>`). Default `SG.test`. */
  apiKey?: string;
  /**
   * Sign Event Webhook POSTs like SendGrid's Signed Event Webhook (ECDSA P-256 over
   * `timestamp + body`); the public key is then `verificationKey`. Default false.
   */
  signEvents?: boolean;
  /**
   * The port to listen on, on 127.0.0.1. Default 0: a free port chosen by the OS. A fixed port
   * gives a stable `baseUrl`, e.g. to start a fake again at the address a mail service or a
   * child process already has.
   */
  port?: number;
}

/** Result of one Event Webhook POST made by `deliverEvents`. */
export interface WebhookDelivery {
  url: string;
  events: SendGridEvent[];
  /** The HTTP status your handler answered, or 0 when the POST failed. */
  status: number;
  /** The response body (text). */
  body: string;
}

const MAIL_SEND = '/v3/mail/send';

/** SendGrid-shaped error body for a status: `{ errors: [{ message, field, help }] }`. */
export function sendGridErrorBody(status: number, message?: string, field: string | null = null) {
  const defaults: Record<number, string> = {
    400: 'Bad Request',
    401: 'The provided authorization grant is invalid, expired, or revoked',
    403: 'access forbidden',
    404: 'not found',
    413: 'Payload Too Large',
    429: 'too many requests',
    500: 'internal server error',
    502: 'bad gateway',
    503: 'service unavailable',
  };
  return { errors: [{ message: message ?? defaults[status] ?? 'error', field, help: null }] };
}

/**
 * The fake. Start with `FakeSendGrid.start()`, point a MailService at it with `mailService()` (or
 * `createMailService({ apiKey: 'SG.test', baseUrl: fake.baseUrl })`), stop with `close()`.
 * Request recording, fault injection (`inject`, default route `send`) and refused connections
 * come from `LoopbackFake` (`@cyclone/idempotency/testing`).
 */
export class FakeSendGrid extends LoopbackFake<SendGridRoute> {
  /** E-mails accepted (the effects), in order. */
  readonly sent: AcceptedMail[] = [];
  /** Event Webhook POSTs made by `deliverEvents`. */
  readonly deliveries: WebhookDelivery[] = [];
  /** The accepted API key. */
  readonly apiKey: string;
  private readonly signingKey: KeyObject | undefined;
  /** Base64 DER (SPKI) of the event-signing public key, as SendGrid shows it; '' when unsigned. */
  readonly verificationKey: string;

  private constructor(options: FakeSendGridOptions) {
    super('send');
    this.apiKey = options.apiKey ?? 'SG.test';
    if (options.signEvents) {
      const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
      this.signingKey = privateKey;
      this.verificationKey = publicKey.export({ type: 'spki', format: 'der' }).toString('base64');
    } else {
      this.verificationKey = '';
    }
  }

  /**
   * Starts a fake on 127.0.0.1, on `options.port` (default: a free port).
   * @throws the listen error, e.g. `EADDRINUSE` when `options.port` is taken.
   */
  static async start(options: FakeSendGridOptions = {}): Promise<FakeSendGrid> {
    const fake = new FakeSendGrid(options);
    await fake.server.listen(options.port ?? 0);
    return fake;
  }

  /** `http://127.0.0.1:PORT/`: the value for `setDefaultRequest('baseUrl', …)`. */
  get baseUrl(): string {
    return `${this.origin}/`;
  }

  /** Requests to `POST /v3/mail/send`, whatever their outcome. */
  get sendRequests(): RecordedRequest[] {
    return this.requests.filter((r) => r.route === 'send');
  }

  /** Number of e-mails accepted: the effect count. */
  get effects(): number {
    return this.sent.length;
  }

  /** Accepted e-mails whose `custom_args.cyclone_key` (top-level or in a personalization) is `key`. */
  sentWithKey(key: string): AcceptedMail[] {
    return this.sent.filter((m) => keysOf(m.body).includes(key));
  }

  /**
   * A MailService (own `Client`, never the singletons) pointed at this fake: `setApiKey` first,
   * then `baseUrl` (`setApiKey` resets the base URL).
   * @param timeoutMs the SDK request timeout. Default 2,000 ms.
   */
  mailService(options: { timeoutMs?: number } = {}): MailService {
    return createMailService({
      apiKey: this.apiKey,
      baseUrl: this.baseUrl,
      timeoutMs: options.timeoutMs ?? 2_000,
    });
  }

  /**
   * The Event Webhook events SendGrid would post for `mail`: one per recipient and event type,
   * with the message's top-level `custom_args` (overridden by its personalization's) as extra
   * keys, `sg_message_id` starting with the X-Message-Id.
   */
  eventsFor(
    mail: AcceptedMail,
    types: readonly string[] = ['processed', 'delivered'],
  ): SendGridEvent[] {
    const out: SendGridEvent[] = [];
    const personalizations = Array.isArray(mail.body.personalizations)
      ? (mail.body.personalizations as Record<string, unknown>[])
      : [];
    const categories = Array.isArray(mail.body.categories)
      ? (mail.body.categories as string[])
      : undefined;
    const ts = Math.floor(Date.now() / 1000);
    personalizations.forEach((p, i) => {
      const args = { ...mail.customArgs, ...stringRecord(p.custom_args) };
      for (const email of recipientsOf(p)) {
        for (const event of types) {
          out.push({
            ...args,
            email,
            timestamp: ts,
            event,
            sg_event_id: randomBytes(16).toString('base64url'),
            sg_message_id: `${mail.messageId}.filterdrecv-fake-${i}-${ts.toString(16)}.0`,
            'smtp-id': `<${mail.messageId}@fake.sendgrid.net>`,
            ...(categories ? { category: categories } : {}),
          });
        }
      }
    });
    return out;
  }

  /**
   * POSTs Event Webhook events to `url` as SendGrid does (a JSON array; signed when the fake was
   * started with `signEvents`). Default: `processed` and `delivered` for every accepted e-mail
   * (or only `mails`).
   */
  async deliverEvents(
    url: string,
    options: { mails?: AcceptedMail[]; types?: readonly string[]; events?: SendGridEvent[] } = {},
  ): Promise<WebhookDelivery> {
    const events =
      options.events ??
      (options.mails ?? this.sent).flatMap((m) => this.eventsFor(m, options.types));
    const body = JSON.stringify(events);
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    if (this.signingKey) {
      const timestamp = String(Math.floor(Date.now() / 1000));
      const signer = createSign('sha256');
      signer.update(timestamp + body);
      headers['x-twilio-email-event-webhook-signature'] = signer.sign(this.signingKey, 'base64');
      headers['x-twilio-email-event-webhook-timestamp'] = timestamp;
    }
    let delivery: WebhookDelivery;
    try {
      const res = await fetch(url, { method: 'POST', headers, body });
      delivery = { url, events, status: res.status, body: await res.text() };
    } catch (err) {
      delivery = { url, events, status: 0, body: String(err) };
    }
    this.deliveries.push(delivery);
    return delivery;
  }

  /** `POST /v3/mail/send` is `send`; anything else is `unknown` (404). */
  protected routeOf(method: string, path: string): SendGridRoute | 'unknown' {
    return method === 'POST' && path === MAIL_SEND ? 'send' : 'unknown';
  }

  /** `send` with the standard fault semantics (`runWithFault`); anything else 404. */
  protected async handle(route: SendGridRoute | 'unknown', ex: Exchange): Promise<void> {
    if (route === 'unknown') {
      ex.respond({ status: 404, body: sendGridErrorBody(404) });
      return;
    }
    await runWithFault(
      ex,
      () => this.mailSend(ex.request),
      (s) => sendGridErrorBody(s),
    );
  }

  /** `POST /v3/mail/send`: authenticate, validate, then accept (the effect). */
  private mailSend(req: RecordedRequest): RouteResponse {
    if (req.headers.authorization !== `Bearer ${this.apiKey}`) {
      return { status: 401, body: sendGridErrorBody(401) };
    }
    const problem = validate(req.json);
    if (problem)
      return { status: 400, body: sendGridErrorBody(400, problem.message, problem.field) };
    const body = req.json as Record<string, unknown>;
    const messageId = randomBytes(16).toString('base64url').slice(0, 22);
    const personalizations = body.personalizations as Record<string, unknown>[];
    this.sent.push({
      messageId,
      recipients: personalizations.flatMap(recipientsOf),
      subject: typeof body.subject === 'string' ? body.subject : undefined,
      customArgs: stringRecord(body.custom_args),
      body,
      request: req,
      at: new Date(),
    });
    return { status: 202, headers: { 'x-message-id': messageId } };
  }
}

function stringRecord(v: unknown): Record<string, string> {
  if (!v || typeof v !== 'object') return {};
  const out: Record<string, string> = {};
  for (const [k, x] of Object.entries(v)) if (typeof x === 'string') out[k] = x;
  return out;
}

function recipientsOf(p: Record<string, unknown>): string[] {
  const out: string[] = [];
  for (const field of ['to', 'cc', 'bcc']) {
    const list = p[field];
    if (!Array.isArray(list)) continue;
    for (const a of list) {
      const email = (a as { email?: unknown })?.email;
      if (typeof email === 'string') out.push(email);
    }
  }
  return out;
}

/** Every `cyclone_key` custom arg of a mail body (top-level and per personalization). */
function keysOf(body: Record<string, unknown>): string[] {
  const keys: string[] = [];
  const top = stringRecord(body.custom_args).cyclone_key;
  if (top) keys.push(top);
  if (Array.isArray(body.personalizations)) {
    for (const p of body.personalizations as Record<string, unknown>[]) {
      const k = stringRecord(p.custom_args).cyclone_key;
      if (k) keys.push(k);
    }
  }
  return keys;
}

const EMAIL = /^[^\s@]+@[^\s@]+$/;

/** The subset of SendGrid's request validation the fake enforces; `undefined` when valid. */
function validate(json: unknown): { message: string; field: string } | undefined {
  if (!json || typeof json !== 'object' || Array.isArray(json)) {
    return { message: 'Bad Request', field: '' };
  }
  const b = json as Record<string, unknown>;
  const ps = b.personalizations;
  if (!Array.isArray(ps) || ps.length === 0) {
    return {
      message: 'The personalizations field is required and must have at least one personalization.',
      field: 'personalizations',
    };
  }
  if (ps.length > 1000) {
    return {
      message: 'You may not have more than 1000 personalizations.',
      field: 'personalizations',
    };
  }
  for (const [i, p] of ps.entries()) {
    const to = (p as { to?: unknown })?.to;
    if (!Array.isArray(to) || to.length === 0) {
      return {
        message:
          'The to array is required for all personalization objects, and must have at least one email object with a valid email address.',
        field: `personalizations.${i}.to`,
      };
    }
    for (const [j, a] of [...to].entries()) {
      const email = (a as { email?: unknown })?.email;
      if (typeof email !== 'string' || !EMAIL.test(email)) {
        return {
          message: 'Does not contain a valid address.',
          field: `personalizations.${i}.to.${j}.email`,
        };
      }
    }
  }
  const from = (b.from as { email?: unknown } | undefined)?.email;
  if (typeof from !== 'string' || !EMAIL.test(from)) {
    return { message: 'The from email does not contain a valid address.', field: 'from.email' };
  }
  const template = typeof b.template_id === 'string' && b.template_id.length > 0;
  if (!template) {
    const subjects =
      typeof b.subject === 'string' && b.subject.length > 0
        ? true
        : ps.every((p) => typeof (p as { subject?: unknown }).subject === 'string');
    if (!subjects) {
      return {
        message:
          'The subject is required. You can get around this requirement if you use a template with a subject defined or if every personalization has a subject defined.',
        field: 'subject',
      };
    }
    const content = b.content;
    if (
      !Array.isArray(content) ||
      content.length === 0 ||
      content.some(
        (c) =>
          typeof (c as { value?: unknown })?.value !== 'string' || !(c as { value: string }).value,
      )
    ) {
      return {
        message:
          'Unless a valid template_id is provided, the content parameter is required. There must be at least one defined content block. We typically suggest both text/plain and text/html blocks are included, but only one block is required.',
        field: 'content',
      };
    }
  }
  const args = b.custom_args;
  if (args !== undefined) {
    if (
      !args ||
      typeof args !== 'object' ||
      Object.values(args).some((v) => typeof v !== 'string')
    ) {
      return {
        message: 'Custom arguments must be key/value pairs of strings.',
        field: 'custom_args',
      };
    }
    if (Buffer.byteLength(JSON.stringify(args)) > 10_000) {
      return {
        message: 'The custom arguments must not exceed 10,000 bytes.',
        field: 'custom_args',
      };
    }
  }
  return undefined;
}
