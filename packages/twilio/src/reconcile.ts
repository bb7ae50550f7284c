/**
 * The evidence that settles an unknown outcome (this adapter's reconciliation source, as
 * `reconcile.ts` is in each adapter): Twilio's status callbacks. The adapter adds
 * `ck=<idempotency key>` to the message's `StatusCallback` URL; Twilio POSTs the message's status changes (from `sent` on; there is no
 * callback for `queued`/`accepted`) to that URL, signed with `X-Twilio-Signature` over the full
 * URL, query included. The handler verifies the signature with the real `twilio.validateRequest`
 * and records the callback under its key into `<schema>.cyclone_twilio_callbacks`, where the
 * adapter's `'reconcile'` policy finds (`callbacksForKey`) the message SID of a key whose create
 * call had an unknown outcome, before it falls back to Twilio's message list.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { DEFAULT_SCHEMA, quoteSchema } from '@cyclone/core/internal';
import twilio from 'twilio';
import type { TwilioDb } from './tables.js';

/** The query parameter of the status callback URL that carries the idempotency key. */
export const KEY_PARAM = 'ck';

/** Twilio's limit on a callback URL's length, in characters (error 21609). */
export const MAX_CALLBACK_URL_LENGTH = 4000;

/**
 * `base` with `ck=<key>` added to its query (an existing `ck` is replaced), exactly as it must be
 * given to Twilio: the signature of every callback covers this string.
 * @param base an absolute http(s) URL, publicly reachable by Twilio (no underscores in the host).
 * @throws TypeError when `base` is not an absolute http(s) URL, or the result is over 4,000
 *   characters (Twilio would refuse the message with 21609).
 */
export function statusCallbackUrl(base: string, key: string): string {
  let u: URL;
  try {
    u = new URL(base);
  } catch {
    throw new TypeError(`statusCallback base ${JSON.stringify(base)} is not an absolute URL`);
  }
  if (u.protocol !== 'https:' && u.protocol !== 'http:') {
    throw new TypeError(`statusCallback base must be http(s), got ${u.protocol}`);
  }
  u.searchParams.set(KEY_PARAM, key);
  const url = u.toString();
  if (url.length > MAX_CALLBACK_URL_LENGTH) {
    throw new TypeError(
      `the status callback URL would be ${url.length} characters, over Twilio's ${MAX_CALLBACK_URL_LENGTH}`,
    );
  }
  return url;
}

/** Options of the status-callback handler. */
export interface StatusCallbackOptions extends TwilioDb {
  /** The auth token Twilio signs with (the account's, or the SharedKey secret). */
  authToken: string;
}

/** One callback request as the handler needs it. */
export interface StatusCallbackRequest {
  /** The full URL Twilio requested, exactly as signed (scheme, host, path and query). */
  url: string;
  /** The `X-Twilio-Signature` header. */
  signature: string | undefined;
  /** The POSTed form parameters. */
  params: Record<string, string | string[]>;
  /** The `I-Twilio-Idempotency-Token` header, if any (kept for operators). */
  deliveryToken?: string;
}

/** What the handler did with one callback. */
export interface StatusCallbackResult {
  /** The HTTP status to answer: 204 (recorded or ignored), 400 (malformed), 403 (bad signature). */
  status: number;
  /** True when a new row was written (a repeat of the same key, SID and status is not). */
  recorded: boolean;
  /** The key from the URL's `ck`, when there was one. */
  key?: string;
  /** Why nothing was recorded, when nothing was. */
  reason?: string;
}

const one = (v: string | string[] | undefined): string | undefined => (Array.isArray(v) ? v[0] : v);

/**
 * Handles one status callback, framework-agnostic: verifies `X-Twilio-Signature` with
 * `twilio.validateRequest(authToken, signature, url, params)`, then records `(ck, MessageSid,
 * MessageStatus)` once. A valid callback without `ck` (not sent through the adapter) is
 * acknowledged and ignored. Answer Twilio with `result.status`; on a thrown error answer 5xx.
 * @throws the database error when recording fails.
 */
export async function handleStatusCallback(
  options: StatusCallbackOptions,
  request: StatusCallbackRequest,
): Promise<StatusCallbackResult> {
  const q = quoteSchema(options.schema ?? DEFAULT_SCHEMA);
  if (
    !request.signature ||
    !twilio.validateRequest(options.authToken, request.signature, request.url, request.params)
  ) {
    return { status: 403, recorded: false, reason: 'invalid or missing X-Twilio-Signature' };
  }
  let key: string | null;
  try {
    key = new URL(request.url).searchParams.get(KEY_PARAM);
  } catch {
    return { status: 400, recorded: false, reason: 'the URL is not absolute' };
  }
  if (!key) return { status: 204, recorded: false, reason: `no ${KEY_PARAM} in the URL` };
  const sid = one(request.params.MessageSid) ?? one(request.params.SmsSid);
  const status = one(request.params.MessageStatus) ?? one(request.params.SmsStatus);
  if (!sid || !status) {
    return { status: 400, recorded: false, key, reason: 'MessageSid or MessageStatus missing' };
  }
  const r = await options.pool.query(
    `INSERT INTO ${q}.cyclone_twilio_callbacks
       (cyclone_key, message_sid, message_status, error_code, account_sid, to_number, from_number,
        delivery_token, params)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
     ON CONFLICT ON CONSTRAINT cyclone_twilio_callbacks_unique DO NOTHING`,
    [
      key,
      sid,
      status,
      one(request.params.ErrorCode) ?? null,
      one(request.params.AccountSid) ?? null,
      one(request.params.To) ?? null,
      one(request.params.From) ?? null,
      request.deliveryToken ?? null,
      JSON.stringify(request.params),
    ],
  );
  return { status: 204, recorded: (r.rowCount ?? 0) > 0, key };
}

/** Options of `statusCallbackListener`. */
export interface StatusCallbackListenerOptions extends StatusCallbackOptions {
  /**
   * The public origin Twilio calls, e.g. `https://app.example.com` (behind a proxy the local
   * `Host` is not what Twilio signed). The signed URL is this origin + the request's path and
   * query. A function gets the request and returns the full URL instead.
   */
  publicUrl: string | ((req: IncomingMessage) => string);
}

type NodeRequest = IncomingMessage & { body?: unknown; originalUrl?: string };

/**
 * The status-callback handler as a `node:http` listener (also an Express/Connect route handler:
 * it uses `req.body` when `express.urlencoded()` already parsed it, and `req.originalUrl`).
 * Answers the status of `handleStatusCallback`, 500 on a database error (Twilio then retries
 * per its webhook connection overrides).
 */
export function statusCallbackListener(
  options: StatusCallbackListenerOptions,
): (req: IncomingMessage, res: ServerResponse) => Promise<void> {
  return async (req, res) => {
    const send = (status: number, body?: unknown) => {
      if (res.headersSent) return;
      if (status === 204 || body === undefined) {
        res.writeHead(status);
        res.end();
        return;
      }
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(body));
    };
    try {
      const r = req as NodeRequest;
      let params: Record<string, string | string[]>;
      if (r.body && typeof r.body === 'object' && !Buffer.isBuffer(r.body)) {
        params = r.body as Record<string, string | string[]>;
      } else {
        let raw: string;
        if (Buffer.isBuffer(r.body) || typeof r.body === 'string') raw = String(r.body);
        else {
          const chunks: Buffer[] = [];
          for await (const c of req) chunks.push(c as Buffer);
          raw = Buffer.concat(chunks).toString('utf8');
        }
        params = {};
        for (const [k, v] of new URLSearchParams(raw)) {
          const prev = params[k];
          params[k] = prev === undefined ? v : Array.isArray(prev) ? [...prev, v] : [prev, v];
        }
      }
      const path = r.originalUrl ?? req.url ?? '/';
      const url =
        typeof options.publicUrl === 'function'
          ? options.publicUrl(req)
          : `${options.publicUrl.replace(/\/+$/, '')}${path}`;
      const sig = req.headers['x-twilio-signature'];
      const token = req.headers['i-twilio-idempotency-token'];
      const result = await handleStatusCallback(options, {
        url,
        signature: Array.isArray(sig) ? sig[0] : sig,
        params,
        ...(typeof token === 'string' ? { deliveryToken: token } : {}),
      });
      send(result.status, result.status === 204 ? undefined : result);
    } catch (err) {
      send(500, { error: (err as Error).message });
    }
  };
}

/** One recorded callback, as the reconciler reads it. */
export interface RecordedCallback {
  messageSid: string;
  messageStatus: string;
  errorCode: string | null;
  to: string | null;
  from: string | null;
  receivedAt: Date;
}

/**
 * The recorded callbacks of `key`, oldest first.
 * @throws the database error.
 */
export async function callbacksForKey(db: TwilioDb, key: string): Promise<RecordedCallback[]> {
  const q = quoteSchema(db.schema ?? DEFAULT_SCHEMA);
  const { rows } = await db.pool.query(
    `SELECT message_sid, message_status, error_code, to_number, from_number, received_at
     FROM ${q}.cyclone_twilio_callbacks WHERE cyclone_key = $1 ORDER BY received_at, id`,
    [key],
  );
  return rows.map((r) => ({
    messageSid: r.message_sid as string,
    messageStatus: r.message_status as string,
    errorCode: (r.error_code as string | null) ?? null,
    to: (r.to_number as string | null) ?? null,
    from: (r.from_number as string | null) ?? null,
    receivedAt: r.received_at as Date,
  }));
}
