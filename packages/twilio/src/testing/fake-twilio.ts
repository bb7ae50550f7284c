/**
 * A local fake of Twilio's Programmable Messaging REST API: create, list (with the
 * `To`/`From`/`DateSent` filters) and fetch of Message resources on 127.0.0.1, Twilio's JSON shapes
 * and error bodies, an effect counter, and status callbacks signed with the real
 * `X-Twilio-Signature` algorithm (HMAC-SHA1 of the URL plus the sorted parameters, keyed by the
 * auth token), so the application's signature check runs for real.
 */
import { createHmac, randomBytes } from 'node:crypto';
import {
  type Exchange,
  LoopbackFake,
  type RecordedRequest,
  type RouteResponse,
  runWithFault,
} from '@cyclone/idempotency/testing';
import twilio from 'twilio';
import { LoopbackRequestClient } from './loopback-client.js';

/** Routes of the fake, for fault targeting. */
export type TwilioRoute = 'create' | 'list' | 'fetch';

/** Message statuses (https://www.twilio.com/docs/messaging/api/message-resource#message-status-values). */
export type MessageStatus =
  | 'accepted'
  | 'scheduled'
  | 'queued'
  | 'sending'
  | 'sent'
  | 'delivered'
  | 'undelivered'
  | 'failed'
  | 'canceled'
  | 'read'
  | 'receiving'
  | 'received';

/** A message as the fake stores it. Dates are `Date`s; `toJSON` renders Twilio's shape. */
export interface FakeMessage {
  sid: string;
  accountSid: string;
  to: string;
  from: string | null;
  messagingServiceSid: string | null;
  body: string;
  mediaUrls: string[];
  status: MessageStatus;
  statusCallback: string | null;
  dateCreated: Date;
  dateUpdated: Date;
  dateSent: Date | null;
  errorCode: number | null;
  errorMessage: string | null;
  /** The create request, or undefined for a seeded message. */
  request: RecordedRequest | undefined;
}

/** One status callback POST made by the fake. */
export interface StatusCallbackDelivery {
  /** The URL as the message's `StatusCallback` gave it: the one signed. */
  url: string;
  /** Where the POST actually went (after `callbackTarget`). */
  target: string;
  /** The form parameters posted. */
  params: Record<string, string>;
  /** The `X-Twilio-Signature` header sent. */
  signature: string;
  /** Your handler's HTTP status, or 0 when the POST failed. */
  status: number;
  /** Your handler's response body (or the error). */
  body: string;
}

/** Options of `FakeTwilio.start`. */
export interface FakeTwilioOptions {
  /** Default: `AC` + 32 random hex digits. */
  accountSid?: string;
  /** Default: 32 random hex digits. */
  authToken?: string;
  /**
   * How far a created message advances on its own, right after the create answer: `sent` (the
   * default; sets `date_sent`), `delivered` (through `sent`), or `none` (stays queued/accepted
   * until `advance`). Each step posts a status callback when the message has a `StatusCallback`.
   */
  autoAdvance?: 'none' | 'sent' | 'delivered';
  /**
   * Maps a message's `StatusCallback` URL to where the fake really POSTs (e.g. your public
   * `https://app.example/hooks/twilio/status?ck=…` to a loopback server). The signature is still
   * computed over the original URL, as Twilio signs the URL it was given. Default: unchanged.
   */
  callbackTarget?: (url: string) => string;
  /**
   * The port to listen on, on 127.0.0.1. Default 0: a free port chosen by the OS. A fixed port
   * gives a stable `origin`, e.g. to start a fake again at the address a client or a child
   * process already has.
   */
  port?: number;
}

const API = '/2010-04-01';
const ACCOUNTS = `${API}/Accounts/`;

/**
 * Twilio's `X-Twilio-Signature` for a form POST to `url` (https://www.twilio.com/docs/usage/security):
 * HMAC-SHA1 over the full URL followed by every parameter name and value, sorted by name, keyed
 * by the auth token, base64.
 */
export function twilioSignature(
  authToken: string,
  url: string,
  params: Record<string, string>,
): string {
  const data = Object.keys(params)
    .sort()
    .reduce((acc, k) => acc + k + params[k], url);
  return createHmac('sha1', authToken).update(Buffer.from(data, 'utf8')).digest('base64');
}

/** Legacy Twilio error body (→ `RestException` in the SDK): `{ code, message, more_info, status }`. */
export function twilioError(status: number, code: number, message: string) {
  return { code, message, more_info: `https://www.twilio.com/docs/errors/${code}`, status };
}

/** RFC 9457 Twilio error body (→ `TwilioServiceException`): `{ type, title, status, code, detail }`. */
export function twilioProblem(status: number, code: number, title: string, detail?: string) {
  return {
    type: `https://www.twilio.com/docs/errors/${code}`,
    title,
    status,
    code,
    ...(detail ? { detail } : {}),
  };
}

const DEFAULT_ERRORS: Record<number, [number, string]> = {
  400: [21211, "The 'To' number is not a valid phone number."],
  401: [20003, 'Authenticate'],
  403: [20403, 'Forbidden'],
  404: [20404, 'The requested resource was not found'],
  429: [20429, 'Too Many Requests'],
  500: [20500, 'Internal Server Error'],
  502: [20502, 'Bad Gateway'],
  503: [20503, 'Service Unavailable'],
};

/** The default legacy error body of a `status` fault. */
export function defaultTwilioError(status: number) {
  const [code, message] = DEFAULT_ERRORS[status] ?? [0, `HTTP ${status}`];
  return twilioError(status, code, message);
}

/** RFC 2822 as Twilio renders dates: `ddd, DD MMM YYYY HH:mm:ss +0000`. */
export function rfc2822(d: Date): string {
  return d.toUTCString().replace('GMT', '+0000');
}

const E164 = /^(whatsapp:)?\+[1-9]\d{6,14}$/;

/**
 * Twilio's magic test numbers (https://www.twilio.com/docs/iam/test-credentials) as `To`:
 * each answers its error without creating a message.
 */
const MAGIC_TO: Record<string, [number, string]> = {
  '+15005550001': [21211, "The 'To' number +15005550001 is not a valid phone number."],
  '+15005550002': [21612, "The 'To' phone number is not currently reachable via SMS."],
  '+15005550003': [21408, 'Permission to send an SMS has not been enabled for the region.'],
  '+15005550004': [21610, 'Attempt to send to unsubscribed recipient'],
  '+15005550009': [21614, "'To' number is not a valid mobile number"],
};

/**
 * The fake. `FakeTwilio.start()`, then `client()` for a real `twilio` client pointed at it (or
 * `twilio(sid, token, { httpClient: new LoopbackRequestClient(fake.origin) })`), `close()` at the
 * end. Request recording, fault injection (`inject`, default route `create`) and refused
 * connections come from `LoopbackFake` (`@cyclone/idempotency/testing`).
 */
export class FakeTwilio extends LoopbackFake<TwilioRoute> {
  readonly accountSid: string;
  readonly authToken: string;
  /** Every message the fake knows (created and seeded), in creation order. */
  readonly messages: FakeMessage[] = [];
  /** Status callback POSTs made, in order. */
  readonly callbacks: StatusCallbackDelivery[] = [];
  private readonly autoAdvance: 'none' | 'sent' | 'delivered';
  private readonly callbackTarget: (url: string) => string;
  private readonly pending = new Set<Promise<unknown>>();

  private constructor(options: FakeTwilioOptions) {
    super('create');
    this.accountSid = options.accountSid ?? `AC${randomBytes(16).toString('hex')}`;
    this.authToken = options.authToken ?? randomBytes(16).toString('hex');
    this.autoAdvance = options.autoAdvance ?? 'sent';
    this.callbackTarget = options.callbackTarget ?? ((u) => u);
  }

  /**
   * Starts a fake on 127.0.0.1, on `options.port` (default: a free port).
   * @throws the listen error, e.g. `EADDRINUSE` when `options.port` is taken.
   */
  static async start(options: FakeTwilioOptions = {}): Promise<FakeTwilio> {
    const fake = new FakeTwilio(options);
    await fake.server.listen(options.port ?? 0);
    return fake;
  }

  /** The `POST …/Messages.json` requests, whatever their outcome. */
  get createRequests(): RecordedRequest[] {
    return this.requests.filter((r) => r.route === 'create');
  }

  /** Messages created through the API (seeded ones excluded). */
  get created(): FakeMessage[] {
    return this.messages.filter((m) => m.request !== undefined);
  }

  /** Number of messages created through the API: the effect count. */
  get effects(): number {
    return this.created.length;
  }

  /**
   * A real `twilio` client for this fake: `twilio(accountSid, authToken, { httpClient })` with a
   * `LoopbackRequestClient` (the SDK takes no base URL, so requests are rewritten).
   * @param timeoutMs the SDK request timeout. Default 2,000 ms.
   * @param autoRetry the SDK's 429 retry. Default false (the SDK's default).
   */
  client(options: { timeoutMs?: number; autoRetry?: boolean } = {}): twilio.Twilio {
    return twilio(this.accountSid, this.authToken, {
      httpClient: new LoopbackRequestClient(this.origin, {
        timeout: options.timeoutMs ?? 2_000,
        autoRetry: options.autoRetry ?? false,
      }),
    });
  }

  /** Resolves once no request is being handled and every status callback POST has finished. */
  override async idle(): Promise<void> {
    for (;;) {
      await super.idle();
      if (this.pending.size === 0) return;
      await Promise.allSettled([...this.pending]);
    }
  }

  /**
   * Adds a message as if sent earlier (not an effect of the test): for "several candidates" and
   * "sent before the attempt" cases of reconciliation. Defaults: status `sent`, created and sent
   * now, a `From` of `+15005550006`.
   */
  seedMessage(m: {
    to: string;
    body: string;
    from?: string;
    messagingServiceSid?: string;
    status?: MessageStatus;
    dateCreated?: Date;
    dateSent?: Date | null;
  }): FakeMessage {
    const created = m.dateCreated ?? new Date();
    const status = m.status ?? 'sent';
    const msg: FakeMessage = {
      sid: newSid(),
      accountSid: this.accountSid,
      to: m.to,
      from: m.from ?? (m.messagingServiceSid ? null : '+15005550006'),
      messagingServiceSid: m.messagingServiceSid ?? null,
      body: m.body,
      mediaUrls: [],
      status,
      statusCallback: null,
      dateCreated: created,
      dateUpdated: created,
      dateSent:
        m.dateSent !== undefined
          ? m.dateSent
          : status === 'sent' || status === 'delivered'
            ? created
            : null,
      errorCode: null,
      errorMessage: null,
      request: undefined,
    };
    this.messages.push(msg);
    return msg;
  }

  /** The message with this SID. @throws Error when unknown. */
  message(sid: string): FakeMessage {
    const m = this.messages.find((x) => x.sid === sid);
    if (!m) throw new Error(`fake twilio: no message ${sid}`);
    return m;
  }

  /**
   * Moves a message to `status` (sets `date_sent` on `sent`), then POSTs its status callback
   * (when it has one) and resolves with that delivery (undefined without a callback).
   */
  async advance(
    sid: string,
    status: MessageStatus,
    error?: { code: number; message: string },
  ): Promise<StatusCallbackDelivery | undefined> {
    const m = this.message(sid);
    const now = new Date();
    m.status = status;
    m.dateUpdated = now;
    if ((status === 'sent' || status === 'delivered') && !m.dateSent) m.dateSent = now;
    if (error) {
      m.errorCode = error.code;
      m.errorMessage = error.message;
    }
    if (!m.statusCallback) return undefined;
    const p = this.postCallback(m);
    this.pending.add(p);
    try {
      return await p;
    } finally {
      this.pending.delete(p);
    }
  }

  /** A message in Twilio's JSON shape (snake_case, RFC 2822 dates). */
  render(m: FakeMessage): Record<string, unknown> {
    const uri = `${API}/Accounts/${m.accountSid}/Messages/${m.sid}.json`;
    return {
      account_sid: m.accountSid,
      api_version: '2010-04-01',
      body: m.body,
      date_created: rfc2822(m.dateCreated),
      date_sent: m.dateSent ? rfc2822(m.dateSent) : null,
      date_updated: rfc2822(m.dateUpdated),
      direction: 'outbound-api',
      error_code: m.errorCode,
      error_message: m.errorMessage,
      from: m.from,
      messaging_service_sid: m.messagingServiceSid,
      num_media: String(m.mediaUrls.length),
      num_segments: String(Math.max(1, Math.ceil(m.body.length / 153))),
      price: null,
      price_unit: 'USD',
      sid: m.sid,
      status: m.status,
      subresource_uris: {
        media: `${API}/Accounts/${m.accountSid}/Messages/${m.sid}/Media.json`,
        feedback: `${API}/Accounts/${m.accountSid}/Messages/${m.sid}/Feedback.json`,
      },
      to: m.to,
      uri,
    };
  }

  /** Stops the fake (callbacks in flight are awaited first). Idempotent. */
  override async close(): Promise<void> {
    await Promise.allSettled([...this.pending]);
    await super.close();
  }

  /** `…/Accounts/{sid}/Messages.json` (POST `create`, GET `list`), `…/Messages/{sid}.json` (GET `fetch`). */
  protected routeOf(method: string, path: string): TwilioRoute | 'unknown' {
    if (!path.startsWith(ACCOUNTS)) return 'unknown';
    const rest = path.slice(ACCOUNTS.length).split('/');
    if (rest.length === 2 && rest[1] === 'Messages.json') {
      if (method === 'POST') return 'create';
      if (method === 'GET') return 'list';
    }
    if (rest.length === 3 && rest[1] === 'Messages' && method === 'GET') return 'fetch';
    return 'unknown';
  }

  /** Authenticates, then runs the route with the standard fault semantics; unknown routes 404. */
  protected async handle(route: TwilioRoute | 'unknown', ex: Exchange): Promise<void> {
    const req = ex.request;
    if (route === 'unknown') {
      ex.respond({ status: 404, body: defaultTwilioError(404) });
      return;
    }
    const denied = this.authenticate(req);
    if (denied) {
      ex.respond(denied);
      return;
    }
    if (route === 'create') {
      await runWithFault(ex, () => this.create(req), defaultTwilioError);
    } else if (route === 'list') {
      await runWithFault(ex, () => this.list(req), defaultTwilioError);
    } else {
      await runWithFault(ex, () => this.fetch(req), defaultTwilioError);
    }
  }

  private authenticate(req: RecordedRequest): RouteResponse | undefined {
    const expected = `Basic ${Buffer.from(`${this.accountSid}:${this.authToken}`).toString('base64')}`;
    if (req.headers.authorization !== expected) {
      return { status: 401, body: twilioError(401, 20003, 'Authenticate') };
    }
    const account = req.path.slice(ACCOUNTS.length).split('/')[0];
    if (account !== this.accountSid) {
      return {
        status: 404,
        body: twilioError(404, 20404, `The requested resource ${req.path} was not found`),
      };
    }
    return undefined;
  }

  /** `POST Messages.json`: validate like Twilio, then create (the effect). */
  private create(req: RecordedRequest): RouteResponse {
    const f = req.form;
    const to = f.get('To');
    const from = f.get('From');
    const service = f.get('MessagingServiceSid');
    const body = f.get('Body') ?? '';
    const media = f.getAll('MediaUrl');
    const fail = (code: number, message: string): RouteResponse => ({
      status: 400,
      body: twilioError(400, code, message),
    });
    if (!to) return fail(21604, "A 'To' phone number is required.");
    const magic = MAGIC_TO[to];
    if (magic) return fail(magic[0], magic[1]);
    if (!E164.test(to)) return fail(21211, `The 'To' number ${to} is not a valid phone number.`);
    if (!from && !service) return fail(21603, "A 'From' phone number is required.");
    if (from && !E164.test(from) && !/^[A-Za-z0-9 ]{1,11}$/.test(from)) {
      return fail(
        21212,
        `The 'From' number ${from} is not a valid phone number, shortcode, or alphanumeric sender ID.`,
      );
    }
    if (!body && media.length === 0 && !f.get('ContentSid')) {
      return fail(21602, 'Message body is required.');
    }
    if (body.length > 1600)
      return fail(21617, 'The concatenated message body exceeds the 1600 character limit.');
    const callback = f.get('StatusCallback');
    if (callback && callback.length > 4000) {
      return fail(21609, 'Invalid StatusCallback: the URL is longer than 4000 characters.');
    }
    const now = new Date();
    const msg: FakeMessage = {
      sid: newSid(),
      accountSid: this.accountSid,
      to,
      from: from ?? null,
      messagingServiceSid: service ?? null,
      body,
      mediaUrls: media,
      status: service ? 'accepted' : 'queued',
      statusCallback: callback ?? null,
      dateCreated: now,
      dateUpdated: now,
      dateSent: null,
      errorCode: null,
      errorMessage: null,
      request: req,
    };
    this.messages.push(msg);
    const response = { status: 201, body: this.render(msg) };
    // Twilio moves the message on whether or not its answer reaches the client.
    this.startAdvancing(msg);
    return response;
  }

  /** Advances a new message per `autoAdvance` (right after the create's effect). */
  private startAdvancing(m: FakeMessage): void {
    if (this.autoAdvance === 'none') return;
    const p = (async () => {
      await new Promise((r) => setImmediate(r)); // after the create answer is computed
      await this.advance(m.sid, 'sent');
      if (this.autoAdvance === 'delivered') await this.advance(m.sid, 'delivered');
    })();
    this.pending.add(p);
    p.finally(() => this.pending.delete(p));
  }

  /** `GET Messages.json`: filters, newest first, paged. */
  private list(req: RecordedRequest): RouteResponse {
    const q = req.query;
    const to = q.get('To');
    const from = q.get('From');
    const on = dayOf(q.get('DateSent'));
    const before = dayOf(q.get('DateSent<'));
    const after = dayOf(q.get('DateSent>'));
    const pageSize = Math.min(Math.max(Number(q.get('PageSize') ?? 50) || 50, 1), 1000);
    const page = Math.max(Number(q.get('Page') ?? 0) || 0, 0);
    const matches = this.messages
      .map((m, i) => ({ m, i }))
      .filter(({ m }) => {
        if (to && m.to !== to) return false;
        if (from && m.from !== from) return false;
        if (on || before || after) {
          // Date-level (GMT) granularity; unsent messages have no DateSent to compare.
          if (!m.dateSent) return false;
          const d = m.dateSent.toISOString().slice(0, 10);
          if (on && d !== on) return false;
          if (before && d > before) return false;
          if (after && d < after) return false;
        }
        return true;
      })
      .sort((a, b) => b.m.dateCreated.getTime() - a.m.dateCreated.getTime() || b.i - a.i)
      .map(({ m }) => m);
    const slice = matches.slice(page * pageSize, (page + 1) * pageSize);
    const path = req.path;
    const pageUri = (n: number) => {
      const p = new URLSearchParams(q);
      p.set('PageSize', String(pageSize));
      p.set('Page', String(n));
      p.delete('PageToken');
      if (n > 0) p.set('PageToken', `PA${matches[n * pageSize - 1]?.sid ?? ''}`);
      return `${path}?${p.toString()}`;
    };
    const more = (page + 1) * pageSize < matches.length;
    return {
      status: 200,
      body: {
        messages: slice.map((m) => this.render(m)),
        end: page * pageSize + Math.max(slice.length - 1, 0),
        first_page_uri: pageUri(0),
        next_page_uri: more ? pageUri(page + 1) : null,
        page,
        page_size: pageSize,
        previous_page_uri: page > 0 ? pageUri(page - 1) : null,
        start: page * pageSize,
        uri: `${path}?${q.toString()}`,
      },
    };
  }

  /** `GET Messages/{sid}.json`. */
  private fetch(req: RecordedRequest): RouteResponse {
    const sid =
      req.path
        .split('/')
        .pop()
        ?.replace(/\.json$/, '') ?? '';
    const m = this.messages.find((x) => x.sid === sid);
    if (!m) {
      return {
        status: 404,
        body: twilioError(404, 20404, `The requested resource ${req.path} was not found`),
      };
    }
    return { status: 200, body: this.render(m) };
  }

  /** POSTs the status callback of `m`'s current status, signed over its StatusCallback URL. */
  private async postCallback(m: FakeMessage): Promise<StatusCallbackDelivery> {
    const url = m.statusCallback as string;
    const params: Record<string, string> = {
      AccountSid: m.accountSid,
      ApiVersion: '2010-04-01',
      From: m.from ?? '',
      MessageSid: m.sid,
      MessageStatus: m.status,
      SmsSid: m.sid,
      SmsStatus: m.status,
      To: m.to,
    };
    if (m.messagingServiceSid) params.MessagingServiceSid = m.messagingServiceSid;
    if (m.errorCode !== null) params.ErrorCode = String(m.errorCode);
    const signature = twilioSignature(this.authToken, url, params);
    const target = this.callbackTarget(url);
    let delivery: StatusCallbackDelivery;
    try {
      const res = await fetch(target, {
        method: 'POST',
        headers: {
          'content-type': 'application/x-www-form-urlencoded',
          'x-twilio-signature': signature,
          'i-twilio-idempotency-token': randomBytes(16).toString('hex'),
          'user-agent': 'TwilioProxy/1.1',
        },
        body: new URLSearchParams(params).toString(),
      });
      delivery = { url, target, params, signature, status: res.status, body: await res.text() };
    } catch (err) {
      delivery = { url, target, params, signature, status: 0, body: String(err) };
    }
    this.callbacks.push(delivery);
    return delivery;
  }
}

function newSid(): string {
  return `SM${randomBytes(16).toString('hex')}`;
}

/** The GMT date (`YYYY-MM-DD`) of a `DateSent` filter value (a date or an ISO date-time). */
function dayOf(v: string | null): string | undefined {
  if (!v) return undefined;
  const m = /^(\d{4}-\d{2}-\d{2})/.exec(v);
  return m?.[1];
}
