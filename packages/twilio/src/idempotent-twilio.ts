/**
 * `idempotentTwilio`: Twilio SMS that a retry never sends twice. Message create accepts no
 * idempotency key and Twilio warns that retrying after a 500 can send several messages, so the
 * Postgres ledger of `@cyclone/idempotency` is the only guard: `messages.create` goes through
 * `once`, keyed by the step (`${runId}:${node}[:${scope}]`), the message SID is stored as the
 * provider reference, and the status callback URL carries the key (`?ck=`) so callbacks can be
 * matched to it.
 */
import type { Context } from '@cyclone/core';
import {
  deadlineQuietPeriodMs,
  InProgressError,
  idempotencyKey,
  once,
  type Reconcile,
  type ReconcileInfo,
  type ResponseHeaders,
  UnknownOutcomeError,
} from '@cyclone/idempotency';
import type twilio from 'twilio';
import type {
  MessageInstance,
  MessageListInstanceCreateOptions,
} from 'twilio/lib/rest/api/v2010/account/message.js';
import { classifyTwilioError } from './classify.js';
import { installDeadline } from './deadline.js';
import { callbacksForKey, statusCallbackUrl } from './reconcile.js';
import { type SeenResponse, withResponseHeaders } from './response-headers.js';
import type { TwilioDb } from './tables.js';

/** What a guarded create returns (and what the ledger stores and replays). JSON. */
export interface SentSms {
  /** The Message SID (`SM…`), stored as the ledger's provider reference. */
  sid: string;
  accountSid: string;
  /** The status when the result was taken: `queued`/`accepted` on create, later ones when reconciled. */
  status: string;
  to: string;
  from: string | null;
  messagingServiceSid: string | null;
  body: string;
  /** ISO-8601 (Twilio gives second precision), or null. */
  dateCreated: string | null;
  numSegments: string | null;
  errorCode: number | null;
}

/**
 * What to do when an earlier attempt's create has an unknown outcome (a timeout, a reset after
 * the request was written, a 5xx), once the quiet period is over:
 * - `'reconcile'` (default): look for the message. First the status-callback table (a callback
 *   recorded under the key names the SID exactly); then Twilio's message list filtered by
 *   `To`/`From` and `DateSent`, matching the body and a creation time after the call started.
 *   Exactly one message → `succeeded` with it, no send. Several → `UnknownOutcomeError` for an
 *   operator. None → `UnknownOutcomeError` too (a queued message has no `DateSent` yet and the
 *   list may lag); with `assumeNotSentAfterMs` set, none is an `InProgressError` until that time
 *   has passed (the step snoozes and looks again, at half the time waited so far, without using
 *   attempts), then it is sent again.
 * - `'fail'`: discard the step with `UnknownOutcomeError` for an operator, without looking.
 * - `'recall'`: send again — **at least once**: the recipient may get the SMS twice.
 * - a reconcile function of your own (`@cyclone/idempotency`'s `Reconcile`).
 */
export type SmsUnknownPolicy = 'fail' | 'recall' | 'reconcile' | Reconcile<SentSms>;

/** Options of `idempotentTwilio`. Durations are in milliseconds. */
export interface IdempotentTwilioOptions {
  /**
   * One per distinct message of the handler: the key is `${runId}:${node}:${scope}` (without it
   * `${runId}:${node}`). A different message under the same key is an
   * `IdempotencyMismatchError`.
   */
  scope?: string;
  /** The unknown-outcome policy (see `SmsUnknownPolicy`). Default `'reconcile'`. */
  onUnknown?: SmsUnknownPolicy;
  /**
   * Base URL of your status-callback handler (`statusCallbackListener`), publicly reachable by
   * Twilio, e.g. `https://app.example.com/hooks/twilio/status`. The adapter sends it with
   * `ck=<key>` added. A `statusCallback` in the create params takes precedence (and gets `ck`
   * too). Without either, no callback is requested and reconciliation uses the list only.
   */
  statusCallback?: string;
  /** Where the status-callback table is. Default: the step's client (`ctx.client`). */
  callbacks?: TwilioDb;
  /**
   * Tolerance between the database clock (when the call started) and Twilio's `date_created`
   * (whole seconds) when matching listed messages. Default 30,000 ms.
   */
  clockSkewMs?: number;
  /** Most messages the reconciling list reads. Default 200. */
  listLimit?: number;
  /**
   * With `'reconcile'`: when neither a callback nor a listed message is found this long (ms) after
   * the call started, treat the SMS as not sent and send it again; before that, finding nothing
   * is an `InProgressError`: the step snoozes and keeps looking. Default: never (an operator
   * decides). Twilio lists a message by `DateSent` only once it is sent, so keep this well above
   * your worst queueing delay.
   */
  assumeNotSentAfterMs?: number;
  /**
   * How long after a create started its outcome may still arrive; within it an unknown outcome is
   * "in progress": the step snoozes until it ends (no attempt used), never re-sent, then the
   * policy runs. Default: from the client's `RequestClient`:
   * timeout × (1 + 429 retries) + retries × max retry delay + 5,000 ms (35,000 ms with the SDK's
   * defaults: 30 s timeout, no auto-retry).
   */
  quietPeriodMs?: number;
}

/** The guarded surface: `messages.create`, without the callback argument. */
export interface IdempotentTwilio {
  messages: {
    /**
     * Creates the message at most once per key: a `succeeded` ledger row
     * returns its stored `SentSms` without calling Twilio; a `failed` one replays its error.
     * @throws `DefinitiveFailureError` (a 4xx such as 21211; not retried), `NotSentError`
     *   (connection refused; retried), `RateLimitedError` (429: a snooze until its `Retry-After`,
     *   else the rate-limit backoff; no attempt used), `AmbiguousOutcomeError` (timeout, reset,
     *   5xx; retried, then the policy), `UnknownOutcomeError` (policy `fail`, or reconciliation
     *   unsure), `InProgressError` (a snooze), `IdempotencyMismatchError`: see `once`.
     */
    create(params: MessageListInstanceCreateOptions): Promise<SentSms>;
  };
}

/** The part of a `twilio` client the adapter uses. */
export type TwilioMessagingClient = Pick<twilio.Twilio, 'messages'> & {
  httpClient?: {
    defaultTimeout?: number;
    autoRetry?: boolean;
    maxRetries?: number;
    maxRetryDelay?: number;
  };
};

/**
 * The longest time after a create's start that one of its requests can reach Twilio, with this
 * client's `RequestClient` (see `quietPeriodMs`): each request runs under the hard deadline
 * `installDeadline` puts on the client (its timeout), one after the other with the SDK's 429
 * retries, plus `DEADLINE_QUIET_MARGIN_MS`.
 */
export function twilioQuietPeriodMs(client: TwilioMessagingClient): number {
  const h = client.httpClient;
  const timeout = h?.defaultTimeout ?? 30_000;
  const retries = h?.autoRetry ? (h.maxRetries ?? 3) : 0;
  return deadlineQuietPeriodMs(timeout, 1 + retries, retries * (h?.maxRetryDelay ?? 3_000));
}

/** A message instance as stored JSON. */
export function toSentSms(m: MessageInstance): SentSms {
  const created = m.dateCreated as Date | string | null;
  return {
    sid: m.sid,
    accountSid: m.accountSid,
    status: m.status,
    to: m.to,
    from: m.from ?? null,
    messagingServiceSid: m.messagingServiceSid ?? null,
    body: m.body,
    dateCreated:
      created instanceof Date && !Number.isNaN(created.getTime())
        ? created.toISOString()
        : typeof created === 'string'
          ? created
          : null,
    numSegments: m.numSegments ?? null,
    errorCode: m.errorCode ?? null,
  };
}

/**
 * Wraps a `twilio` client for one step: `messages.create` goes through the ledger (`once`), so a
 * retried, reclaimed or operator-retried step never sends an SMS twice under the default policy.
 * The client's own 429 auto-retry may stay on (it only repeats refused requests). The client's
 * `RequestClient` gets a pass-through wrapper (once) that hands each response's headers to the
 * adapter call it answers, so a 429's `Retry-After` can time the snooze.
 *
 * @param client a `twilio(accountSid, authToken, …)` client.
 * @param ctx the handler's context: the key comes from `ctx.runId` and `ctx.node`, the ledger is
 *   in `ctx.client`'s database.
 * @throws `IdempotencyKeyError` for a bad `scope`, `TypeError` for a bad `statusCallback` (at once).
 */
export function idempotentTwilio(
  client: TwilioMessagingClient,
  ctx: Context,
  options: IdempotentTwilioOptions = {},
): IdempotentTwilio {
  const key = idempotencyKey(ctx, options.scope); // validates the scope now
  if (options.statusCallback !== undefined) statusCallbackUrl(options.statusCallback, key);
  installDeadline(client);
  const quietPeriodMs = options.quietPeriodMs ?? twilioQuietPeriodMs(client);
  const policy = options.onUnknown ?? 'reconcile';

  return {
    messages: {
      create(params) {
        const base = params.statusCallback ?? options.statusCallback;
        const seen: SeenResponse = {};
        const onUnknown =
          policy === 'reconcile'
            ? reconcileMessage(client, params, options.callbacks ?? ctx.client, options)
            : policy;
        return once<SentSms>(
          ctx,
          {
            ...(options.scope !== undefined ? { scope: options.scope } : {}),
            // The message as given, without the status callback: the callback URL is where we
            // hear back (it changes with a deploy's public URL), not what is sent, so a retry
            // after such a change is the same request. The `ck` tag depends on the generation.
            request: withoutStatusCallback(params),
            provider: 'twilio',
            operation: 'POST /2010-04-01/Accounts/{AccountSid}/Messages.json',
            onUnknown,
            quietPeriodMs,
            classify: (err) => classifyTwilioError(err, seen.headers as ResponseHeaders),
            reference: (r) => r.sid,
          },
          async (sendKey) => {
            seen.headers = undefined;
            const m = await withResponseHeaders(client, seen, () =>
              client.messages.create({
                ...params,
                ...(base !== undefined ? { statusCallback: statusCallbackUrl(base, sendKey) } : {}),
              }),
            );
            return toSentSms(m);
          },
        );
      },
    },
  };
}

/**
 * The `'reconcile'` policy: the callback table first (a callback names the SID exactly), then
 * the list with a unique match.
 */
function reconcileMessage(
  client: TwilioMessagingClient,
  params: MessageListInstanceCreateOptions,
  db: TwilioDb,
  options: IdempotentTwilioOptions,
): Reconcile<SentSms> {
  const skew = options.clockSkewMs ?? 30_000;
  const limit = options.listLimit ?? 200;
  return async (key: string, info: ReconcileInfo) => {
    const unsure = (reason: string) =>
      new UnknownOutcomeError(info.ledgerKey, info.ownerAttempt, info.callStartedAt, reason);

    const recorded = await callbacksForKey(db, key);
    const sids = [...new Set(recorded.map((c) => c.messageSid))];
    if (sids.length > 1) {
      throw unsure(
        `status callbacks name ${sids.length} messages for this key: ${sids.join(', ')}`,
      );
    }
    if (sids[0]) return toSentSms(await client.messages(sids[0]).fetch());

    const startedMs = info.callStartedAt?.getTime() ?? Date.now() - 86_400_000;
    const since = startedMs - skew;
    const day = new Date(since);
    day.setUTCHours(0, 0, 0, 0); // DateSent has date granularity, in GMT
    const listed = await client.messages.list({
      to: params.to,
      ...(params.from !== undefined ? { from: params.from } : {}),
      dateSentAfter: day,
      limit,
    });
    const candidates = listed.filter((m) => {
      const created = m.dateCreated instanceof Date ? m.dateCreated.getTime() : Number.NaN;
      return (
        created >= since &&
        String(m.direction).startsWith('outbound') &&
        (params.body === undefined || m.body === params.body) &&
        (params.messagingServiceSid === undefined ||
          m.messagingServiceSid === params.messagingServiceSid)
      );
    });
    if (candidates.length === 1) return toSentSms(candidates[0] as MessageInstance);
    if (candidates.length > 1) {
      throw unsure(
        `${candidates.length} listed messages to ${params.to} match the body and time: ${candidates.map((m) => m.sid).join(', ')}`,
      );
    }
    if (options.assumeNotSentAfterMs !== undefined && info.callStartedAt) {
      const waited = Date.now() - startedMs;
      if (waited >= options.assumeNotSentAfterMs) return undefined;
      // Not proven absent yet: snooze and look again (the list may lag) until
      // `assumeNotSentAfterMs` has passed.
      throw InProgressError.lookingAgain(
        info.ledgerKey,
        info.ownerAttempt,
        waited,
        options.assumeNotSentAfterMs - waited,
      );
    }
    throw unsure(
      `no status callback and no listed message to ${params.to} matches since ${new Date(since).toISOString()}`,
    );
  };
}

/** The create params without `statusCallback` (see the request hash in `messages.create`). */
function withoutStatusCallback(params: MessageListInstanceCreateOptions): Record<string, unknown> {
  const { statusCallback: _ignored, ...rest } = params;
  return rest;
}
