/**
 * `idempotentMail`: `@sendgrid/mail` sends that a retry never repeats. SendGrid's Mail Send API
 * has no idempotency key, so the Postgres ledger of `@cyclone/idempotency` is the only guard:
 * every message goes through `once`, keyed by the step (`${runId}:${node}[:${scope}]`), tagged
 * with `custom_args.cyclone_key` (and run and node), which SendGrid echoes in every event, so any
 * copy can be traced; its `X-Message-Id` is stored as the provider reference.
 */
import type { Context } from '@cyclone/core';
import {
  DEFAULT_QUIET_PERIOD_MS,
  InProgressError,
  idempotencyKey,
  once,
  type Reconcile,
  type ReconcileInfo,
  UnknownOutcomeError,
} from '@cyclone/idempotency';
import type { MailDataRequired, MailService } from '@sendgrid/mail';
import { classifySendGridError } from './classify.js';
import { eventsForKey } from './reconcile.js';
import type { SendgridDb } from './tables.js';

/** What a guarded send returns (and what the ledger stores and replays). JSON. */
export interface SentMail {
  /** The HTTP status of the accepted request: 202 (also for a result found by reconciliation). */
  statusCode: number;
  /**
   * SendGrid's `X-Message-Id` of the request: the prefix of every per-recipient
   * `sg_message_id` in events and the Activity API. Null if the response
   * had none.
   */
  messageId: string | null;
}

/**
 * What to do when an earlier attempt's send has an unknown outcome (a timeout, a reset after
 * the request was written, a 5xx), once the quiet period is over:
 * - `'fail'` (default): discard the step with `UnknownOutcomeError` for an operator. Never a
 *   duplicate; a human checks SendGrid (Activity, or the events table) and resolves the key.
 * - `'reconcile'`: look the key up in the Event Webhook table (see `eventWebhookListener`): an
 *   event found → `succeeded` with its X-Message-Id, no send; none → `UnknownOutcomeError`, or,
 *   with `assumeNotSentAfterMs` set, an `InProgressError` until that time has passed (the step
 *   snoozes and looks again, at half the time waited so far, without using attempts), then a
 *   re-send.
 * - `'recall'`: send again — **at least once**: the recipient may get the e-mail twice. Opt in
 *   only where a duplicate is acceptable.
 * - a reconcile function of your own (`@cyclone/idempotency`'s `Reconcile`): resolve the
 *   result when found, `undefined` when provably not sent (→ send again), throw when unsure.
 */
export type MailUnknownPolicy = 'fail' | 'recall' | 'reconcile' | Reconcile<SentMail>;

/** Options of `idempotentMail`. Durations are in milliseconds. */
export interface IdempotentMailOptions {
  /**
   * One per distinct e-mail of the handler: the key is `${runId}:${node}:${scope}` (without it
   * `${runId}:${node}`). Sending a different message under the same key is an
   * `IdempotencyMismatchError`, so a handler that sends two e-mails needs two scopes.
   */
  scope?: string;
  /** The unknown-outcome policy (see `MailUnknownPolicy`). Default `'fail'`. */
  onUnknown?: MailUnknownPolicy;
  /**
   * Where the Event Webhook table is, for `onUnknown: 'reconcile'`. Default: the step's client
   * (`ctx.client`: its pool and schema).
   */
  events?: SendgridDb;
  /**
   * With `'reconcile'`: when no event of the key has arrived this long (ms) after the send started,
   * treat the e-mail as not sent and send it again; before that, no event is an
   * `InProgressError`: the step snoozes and keeps looking. Default: never (an operator decides). Set it
   * only when the Event Webhook is known to work: SendGrid usually posts `processed` within
   * seconds, but a broken webhook would then turn every unknown outcome into a duplicate.
   */
  assumeNotSentAfterMs?: number;
  /**
   * How long after a send started its outcome may still arrive (the mail service's timeout plus a
   * margin); within it an unknown outcome is "in progress": the step snoozes until it ends
   * (no attempt used), never re-sent, then the policy runs.
   * Default: the mail service's timeout + 5,000 ms when it has one (see `createMailService`),
   * else `@cyclone/idempotency`'s default (60,000 ms).
   */
  quietPeriodMs?: number;
}

/** The guarded surface: `@sendgrid/mail`'s `send` and `sendMultiple`, without callbacks. */
export interface IdempotentMail {
  /**
   * Sends one e-mail at most once per key: a `succeeded` ledger row returns
   * its stored result without sending, a `failed` one replays its error.
   * @param isMultiple the SDK's flag: every `to` gets its own personalization (one request).
   * @throws `DefinitiveFailureError` (400/401/403/404/405/413, or a mail the SDK rejected; not
   *   retried), `NotSentError` (connection refused; retried), `RateLimitedError` (429: a snooze
   *   until its `X-RateLimit-Reset`, no attempt used), `AmbiguousOutcomeError` (timeout, reset,
   *   5xx; retried, then the policy), `UnknownOutcomeError` (policy `fail`, or `reconcile`
   *   without an event), `InProgressError` (a snooze), `IdempotencyMismatchError`: see `once`.
   */
  send(data: MailDataRequired, isMultiple?: boolean): Promise<SentMail>;
  /**
   * Sends each e-mail of the array through its own `once`, in parallel, with the scope
   * `${scope}:${index}` (or `${index}`): each has its own key and ledger row, so a retry re-sends
   * none that succeeded. Once every send has settled, rejects with the first failure (in array
   * order); the others' outcomes are recorded on their own.
   */
  send(data: MailDataRequired[], isMultiple?: boolean): Promise<SentMail[]>;
  /** `send(data, true)`: one request, one personalization per `to` address. */
  sendMultiple(data: MailDataRequired): Promise<SentMail>;
}

/** Extra quiet period over the mail service's timeout, in ms. */
const QUIET_MARGIN_MS = 5_000;

/** The mail service's request timeout in ms, read from its client's defaults (undefined: none). */
function serviceTimeoutMs(mail: MailService): number | undefined {
  const t = (mail as unknown as { client?: { defaultRequest?: { timeout?: unknown } } }).client
    ?.defaultRequest?.timeout;
  return typeof t === 'number' && t > 0 ? t : undefined;
}

/** The custom args Cyclone puts on every message: opaque ids only (SendGrid stores them as non-PII). */
function cycloneArgs(key: string, ctx: Context): Record<string, string> {
  return { cyclone_key: key, cyclone_run: ctx.runId, cyclone_node: ctx.node };
}

/**
 * A deep copy of `msg` with the Cyclone custom args set at the top level and in every
 * personalization that has custom args of its own (SendGrid lets those override the top
 * level), replacing any the caller set. The SDK mutates what it is given; the copy protects the
 * caller's object and the request hash.
 */
function tag(msg: MailDataRequired, args: Record<string, string>): MailDataRequired {
  const copy = structuredClone(msg) as MailDataRequired & {
    custom_args?: Record<string, unknown>;
    personalizations?: (Record<string, unknown> & {
      customArgs?: Record<string, unknown>;
      custom_args?: Record<string, unknown>;
    })[];
  };
  const top = { ...(copy.custom_args ?? {}), ...(copy.customArgs ?? {}), ...args };
  delete copy.custom_args;
  copy.customArgs = top;
  for (const p of copy.personalizations ?? []) {
    if (p.customArgs) p.customArgs = { ...p.customArgs, ...args };
    if (p.custom_args) p.custom_args = { ...p.custom_args, ...args };
  }
  return copy;
}

/**
 * Wraps a `@sendgrid/mail` `MailService` for one step: `send` and `sendMultiple` go through the
 * ledger (`once`), so a retried, reclaimed or operator-retried step never sends an e-mail twice
 * under the default policy. Build the service with `createMailService` (own client, a timeout),
 * or pass the SDK's default export.
 *
 * @param mailService the SDK's `MailService` (the singleton `import sgMail from '@sendgrid/mail'`
 *   works too).
 * @param ctx the handler's context: the key comes from `ctx.runId` and `ctx.node`, the ledger is
 *   in `ctx.client`'s database.
 * @throws `IdempotencyKeyError` when `options.scope` is not a valid scope (at once).
 */
export function idempotentMail(
  mailService: MailService,
  ctx: Context,
  options: IdempotentMailOptions = {},
): IdempotentMail {
  if (options.scope !== undefined) idempotencyKey(ctx, options.scope); // validates now
  const timeout = serviceTimeoutMs(mailService);
  const quietPeriodMs =
    options.quietPeriodMs ??
    (timeout !== undefined ? timeout + QUIET_MARGIN_MS : DEFAULT_QUIET_PERIOD_MS);
  const policy = options.onUnknown ?? 'fail';
  const onUnknown =
    policy === 'reconcile'
      ? reconcileFromEvents(options.events ?? ctx.client, options.assumeNotSentAfterMs)
      : policy;

  const sendOne = (msg: MailDataRequired, isMultiple: boolean, scope: string | undefined) =>
    once<SentMail>(
      ctx,
      {
        ...(scope !== undefined ? { scope } : {}),
        // The caller's message as given: the Cyclone tag depends on the generation, so it is
        // added inside the call and not hashed.
        request: { message: msg, isMultiple },
        provider: 'sendgrid',
        operation: 'POST /v3/mail/send',
        onUnknown,
        quietPeriodMs,
        classify: classifySendGridError,
        reference: (r) => r.messageId,
      },
      async (key) => {
        const [response] = await mailService.send(tag(msg, cycloneArgs(key, ctx)), isMultiple);
        const id = response.headers?.['x-message-id'];
        return {
          statusCode: response.statusCode,
          messageId: typeof id === 'string' && id ? id : null,
        };
      },
    );

  // Every message settles (and records its outcome) before the batch rejects, so no guarded
  // call is still in flight when the step's next attempt looks at the ledger.
  async function sendAll(data: MailDataRequired[], isMultiple: boolean): Promise<SentMail[]> {
    const settled = await Promise.allSettled(
      data.map((m, i) =>
        sendOne(m, isMultiple, options.scope !== undefined ? `${options.scope}:${i}` : String(i)),
      ),
    );
    const failed = settled.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failed) throw failed.reason;
    return settled.map((r) => (r as PromiseFulfilledResult<SentMail>).value);
  }

  function send(data: MailDataRequired, isMultiple?: boolean): Promise<SentMail>;
  function send(data: MailDataRequired[], isMultiple?: boolean): Promise<SentMail[]>;
  function send(
    data: MailDataRequired | MailDataRequired[],
    isMultiple = false,
  ): Promise<SentMail | SentMail[]> {
    if (Array.isArray(data)) {
      return sendAll(data, isMultiple);
    }
    return sendOne(data, isMultiple, options.scope);
  }

  return {
    send,
    sendMultiple: (data) => sendOne(data, true, options.scope),
  };
}

/**
 * The `'reconcile'` policy: an Event Webhook event recorded under the key proves SendGrid accepted
 * the request (events follow acceptance only) → its result; no event → an operator (or, past
 * `assumeNotSentAfterMs`, `undefined`: not sent, send again).
 */
function reconcileFromEvents(
  db: SendgridDb,
  assumeNotSentAfterMs: number | undefined,
): Reconcile<SentMail> {
  return async (key: string, info: ReconcileInfo) => {
    const events = await eventsForKey(db, key);
    const withId = events.find((e) => e.messageId);
    if (events.length > 0) return { statusCode: 202, messageId: withId?.messageId ?? null };
    const started = info.callStartedAt?.getTime();
    if (assumeNotSentAfterMs !== undefined && started !== undefined) {
      const waited = Date.now() - started;
      if (waited >= assumeNotSentAfterMs) return undefined;
      // Not proven absent yet: snooze and look again (events may arrive late) until
      // `assumeNotSentAfterMs` has passed.
      throw InProgressError.lookingAgain(
        info.ledgerKey,
        info.ownerAttempt,
        waited,
        assumeNotSentAfterMs - waited,
      );
    }
    throw new UnknownOutcomeError(
      info.ledgerKey,
      info.ownerAttempt,
      info.callStartedAt,
      'no SendGrid Event Webhook event recorded for this key',
    );
  };
}
