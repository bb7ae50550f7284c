/**
 * The evidence that settles an unknown outcome (this adapter's reconciliation source, as
 * `reconcile.ts` is in each adapter): SendGrid's Event Webhook. SendGrid POSTs a JSON array of
 * events for every message it accepted, each event carrying the message's `custom_args` as extra
 * top-level keys. The handler records the events that carry a `cyclone_key` into
 * `<schema>.cyclone_sendgrid_events`; the adapter's `'reconcile'` policy reads them back
 * (`eventsForKey`) to settle an unknown outcome without sending again.
 *
 * Any event type proves that SendGrid accepted the request (`processed` comes first; `delivered`,
 * `deferred`, `bounce`, `dropped`, `open`, … all follow acceptance), so every type is recorded.
 * Signed Event Webhook requests are verified when a verification key is configured (ECDSA P-256
 * over `timestamp + raw body`, SHA-256; https://www.twilio.com/docs/sendgrid/for-developers/tracking-events/getting-started-event-webhook-security-features).
 */
import { createPublicKey, verify } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { DEFAULT_SCHEMA, quoteSchema } from '@cyclone/core/internal';
import type { SendgridDb } from './tables.js';

/** Header with the base64 DER ECDSA signature of a Signed Event Webhook request. */
export const EVENT_SIGNATURE_HEADER = 'x-twilio-email-event-webhook-signature';
/** Header with the timestamp the signature covers (prefixed to the body). */
export const EVENT_TIMESTAMP_HEADER = 'x-twilio-email-event-webhook-timestamp';

/**
 * Verifies a Signed Event Webhook request.
 * @param verificationKey the public key from SendGrid's Mail Settings: base64 DER (SPKI), or PEM.
 * @param payload the raw request body, byte for byte (a re-serialised JSON will not verify).
 * @param signature the `X-Twilio-Email-Event-Webhook-Signature` header.
 * @param timestamp the `X-Twilio-Email-Event-Webhook-Timestamp` header.
 * @returns true when the signature is valid; false otherwise (a malformed key or signature too).
 */
export function verifyEventWebhookSignature(
  verificationKey: string,
  payload: string | Buffer,
  signature: string,
  timestamp: string,
): boolean {
  try {
    const key = verificationKey.includes('-----BEGIN')
      ? createPublicKey(verificationKey)
      : createPublicKey({
          key: Buffer.from(verificationKey, 'base64'),
          format: 'der',
          type: 'spki',
        });
    const data = Buffer.concat([Buffer.from(timestamp, 'utf8'), Buffer.from(payload)]);
    return verify('sha256', data, key, Buffer.from(signature, 'base64'));
  } catch {
    return false;
  }
}

/** Options of the Event Webhook handler. */
export interface EventWebhookOptions extends SendgridDb {
  /**
   * The Signed Event Webhook verification key (base64 DER or PEM). When set, a request without a
   * valid signature is refused with 403 and nothing is recorded. Strongly recommended: anyone who
   * can POST to the URL could otherwise mark a key as sent.
   */
  verificationKey?: string;
}

/** What the handler did with one request. */
export interface EventWebhookResult {
  /** The HTTP status to answer: 200 (recorded), 400 (not a JSON array), 403 (bad signature). */
  status: number;
  /** Events with a `cyclone_key` inserted now (repeats of a known `sg_event_id` excluded). */
  recorded: number;
  /** Events without a `cyclone_key` (or without `event`/`sg_event_id`), skipped. */
  ignored: number;
  /** Why the request was refused, for status 400/403. */
  error?: string;
}

/** One request as the handler needs it: the raw body and the headers (names any case). */
export interface EventWebhookRequest {
  body: string | Buffer;
  headers: Record<string, string | string[] | undefined>;
}

function header(headers: EventWebhookRequest['headers'], name: string): string | undefined {
  for (const [k, v] of Object.entries(headers)) {
    if (k.toLowerCase() === name) return Array.isArray(v) ? v[0] : v;
  }
  return undefined;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * Handles one Event Webhook POST, framework-agnostic: verifies the signature (when configured),
 * parses the JSON array and records the events that carry a `cyclone_key`, once per
 * `sg_event_id`. Answer SendGrid with `result.status`; on a thrown error answer 5xx so SendGrid
 * retries the delivery.
 * @throws the database error when recording fails.
 */
export async function handleEventWebhook(
  options: EventWebhookOptions,
  request: EventWebhookRequest,
): Promise<EventWebhookResult> {
  const q = quoteSchema(options.schema ?? DEFAULT_SCHEMA);
  if (options.verificationKey) {
    const signature = header(request.headers, EVENT_SIGNATURE_HEADER);
    const timestamp = header(request.headers, EVENT_TIMESTAMP_HEADER);
    if (
      !signature ||
      !timestamp ||
      !verifyEventWebhookSignature(options.verificationKey, request.body, signature, timestamp)
    ) {
      return { status: 403, recorded: 0, ignored: 0, error: 'invalid or missing signature' };
    }
  }
  let events: unknown;
  try {
    events = JSON.parse(Buffer.from(request.body).toString('utf8'));
  } catch {
    return { status: 400, recorded: 0, ignored: 0, error: 'the body is not JSON' };
  }
  if (!Array.isArray(events)) {
    return { status: 400, recorded: 0, ignored: 0, error: 'the body is not a JSON array' };
  }
  const rows: {
    id: string;
    key: string;
    run: string | null;
    event: string;
    sg: string | null;
    msg: string | null;
    email: string | null;
    at: string | null;
    payload: string;
  }[] = [];
  let ignored = 0;
  for (const e of events as Record<string, unknown>[]) {
    const key = e?.cyclone_key;
    if (
      typeof key !== 'string' ||
      !key ||
      typeof e.event !== 'string' ||
      typeof e.sg_event_id !== 'string'
    ) {
      ignored++;
      continue;
    }
    const sg = typeof e.sg_message_id === 'string' ? e.sg_message_id : null;
    const ts = typeof e.timestamp === 'number' ? e.timestamp : Number.NaN;
    rows.push({
      id: e.sg_event_id,
      key,
      run: typeof e.cyclone_run === 'string' && UUID.test(e.cyclone_run) ? e.cyclone_run : null,
      event: e.event,
      sg,
      msg: sg ? (sg.split('.')[0] ?? null) : null,
      email: typeof e.email === 'string' ? e.email : null,
      at: Number.isFinite(ts) ? new Date(ts * 1000).toISOString() : null,
      payload: JSON.stringify(e),
    });
  }
  let recorded = 0;
  if (rows.length > 0) {
    const r = await options.pool.query(
      `INSERT INTO ${q}.cyclone_sendgrid_events
         (sg_event_id, cyclone_key, run_id, event, sg_message_id, message_id, email, occurred_at, payload)
       SELECT * FROM unnest($1::text[], $2::text[], $3::uuid[], $4::text[], $5::text[], $6::text[],
                            $7::text[], $8::timestamptz[], $9::jsonb[])
       ON CONFLICT (sg_event_id) DO NOTHING`,
      [
        rows.map((x) => x.id),
        rows.map((x) => x.key),
        rows.map((x) => x.run),
        rows.map((x) => x.event),
        rows.map((x) => x.sg),
        rows.map((x) => x.msg),
        rows.map((x) => x.email),
        rows.map((x) => x.at),
        rows.map((x) => x.payload),
      ],
    );
    recorded = r.rowCount ?? 0;
  }
  return { status: 200, recorded, ignored };
}

/** A request as Express-like frameworks hand it: maybe with the body already read. */
type NodeRequest = IncomingMessage & { body?: unknown; rawBody?: unknown };

/**
 * The Event Webhook handler as a `node:http` listener (also usable as an Express/Connect route
 * handler). It reads the raw body itself, or uses `req.rawBody` / a Buffer or string `req.body`
 * when a body parser ran first (a parsed JSON object cannot be verified: with a verification key
 * it answers 500 and says so). Answers the status of `handleEventWebhook`, 500 on a database error
 * (SendGrid then retries).
 */
export function eventWebhookListener(
  options: EventWebhookOptions,
): (req: IncomingMessage, res: ServerResponse) => Promise<void> {
  return async (req, res) => {
    const send = (status: number, body: unknown) => {
      if (res.headersSent) return;
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(body));
    };
    try {
      const r = req as NodeRequest;
      let body: string | Buffer;
      if (Buffer.isBuffer(r.rawBody) || typeof r.rawBody === 'string') body = r.rawBody;
      else if (Buffer.isBuffer(r.body) || typeof r.body === 'string') body = r.body;
      else if (r.body !== undefined) {
        if (options.verificationKey) {
          send(500, {
            error: 'the body was parsed before the webhook handler: mount it with a raw body',
          });
          return;
        }
        body = JSON.stringify(r.body);
      } else {
        const chunks: Buffer[] = [];
        for await (const c of req) chunks.push(c as Buffer);
        body = Buffer.concat(chunks);
      }
      const result = await handleEventWebhook(options, { body, headers: req.headers });
      send(result.status, result);
    } catch (err) {
      send(500, { error: (err as Error).message });
    }
  };
}

/** One recorded event, as the reconciler reads it. */
export interface RecordedEvent {
  event: string;
  /** The X-Message-Id of the request (the `sg_message_id` prefix), if the event had one. */
  messageId: string | null;
  email: string | null;
  occurredAt: Date | null;
  receivedAt: Date;
}

/**
 * The recorded events of `key`, oldest first.
 * @throws the database error.
 */
export async function eventsForKey(db: SendgridDb, key: string): Promise<RecordedEvent[]> {
  const q = quoteSchema(db.schema ?? DEFAULT_SCHEMA);
  const { rows } = await db.pool.query(
    `SELECT event, message_id, email, occurred_at, received_at FROM ${q}.cyclone_sendgrid_events
     WHERE cyclone_key = $1 ORDER BY occurred_at NULLS LAST, received_at`,
    [key],
  );
  return rows.map((r) => ({
    event: r.event as string,
    messageId: (r.message_id as string | null) ?? null,
    email: (r.email as string | null) ?? null,
    occurredAt: (r.occurred_at as Date | null) ?? null,
    receivedAt: r.received_at as Date,
  }));
}
