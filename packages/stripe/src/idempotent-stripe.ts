/**
 * `idempotentStripe(stripe, ctx, options?)`: the official Stripe client, for one handler
 * attempt, in which every mutating request carries the step's idempotency key and runs under the
 * durable ledger guard of `@cyclone/idempotency` (`once`): Stripe's own key deduplication
 * covers a re-sent request for 24 h, the ledger covers every attempt after that.
 */
import type { Context } from '@cyclone/core';
import {
  boundKey,
  idempotencyKey,
  OutcomeError,
  once,
  type Reconcile,
  type ReconcileInfo,
  UnknownOutcomeError,
} from '@cyclone/idempotency';
import type Stripe from 'stripe';
import { classifyStripeError } from './classify.js';
import { installDeadline } from './deadline.js';
import {
  callerKeyScope,
  callerStripeKey,
  callScope,
  MAX_METADATA_KEYS,
  MAX_STRIPE_KEY_LENGTH,
  markerMetadata,
} from './keys.js';
import { interceptStripe, type MutatingCall } from './proxy.js';
import {
  failedConfirmation,
  findByMarker,
  METADATA_COLLECTIONS,
  RECONCILABLE_COLLECTIONS,
} from './reconcile.js';

/**
 * How long after a call Stripe still replays its key, as the adapter counts it: 23 h in ms.
 * Stripe keeps keys for *at least* 24 h; the hour of margin covers clock
 * skew between the database (which stamps the call) and this process.
 */
export const DEFAULT_REPLAY_WINDOW_MS = 23 * 60 * 60 * 1000;

/**
 * What to do with a call whose outcome is unknown (a lost response, a timeout, a 5xx, a crash
 * between Stripe's answer and the ledger write), on the next attempt:
 * - `'reconcile'` (default): within the replay window (`replayWindowMs`, 23 h) re-send with the
 *   same key, which Stripe deduplicates (a replay, or 409 while the first is still in flight);
 *   past it, list the collection with `created[gte]` and match our `metadata.cyclone_key`: found
 *   → that object is the result, no call; none → re-send; several, or an operation that cannot
 *   be listed (updates, actions such as `/confirm`, `rawRequest`) → `UnknownOutcomeError` for an
 *   operator.
 * - `'recall'`: always re-send with the same key. Past Stripe's window that may run twice.
 * - `'fail'`: discard the step with `UnknownOutcomeError` for an operator.
 * - a reconcile function of your own (see `@cyclone/idempotency`'s `Reconcile`).
 */
export type StripeUnknownPolicy = 'reconcile' | 'recall' | 'fail' | Reconcile<unknown>;

/** Options of `idempotentStripe`. Durations in milliseconds. */
export interface IdempotentStripeOptions {
  /**
   * Scope of the calls made through this wrapper: the first call's ledger key is
   * `${runId}:${node}:${scope}`, the next ones `…:${scope}:call2`, … Without it: `${runId}:${node}`,
   * then `${runId}:${node}:call2`, … Visible ASCII without `#`, ≤ 200 characters (minus room for
   * `:callN`). A request that passes its own `idempotencyKey` is keyed by that instead.
   * @throws IdempotencyKeyError (from `idempotentStripe`) for a bad scope.
   */
  scope?: string;
  /** The unknown-outcome policy. Default `'reconcile'`. */
  onUnknown?: StripeUnknownPolicy;
  /** See `DEFAULT_REPLAY_WINDOW_MS`. */
  replayWindowMs?: number;
  /**
   * How long an unknown outcome left by an earlier attempt is treated as "maybe still in flight"
   * before the policy applies (the step snoozes until then: `InProgressError`). Default 0: a re-send under the same
   * key is safe at Stripe even while the first request is in flight (it gets 409 and the step
   * retries later), so there is nothing to wait for within the replay window.
   */
  quietPeriodMs?: number;
  /**
   * Per-request timeout passed to the SDK (`RequestOptions.timeout`) unless the request sets its
   * own. Default: the client's (stripe-node's default is 80,000 ms). About 30,000 keeps a hung
   * request from outliving the step's lease and timeout, which should stay above it.
   */
  timeoutMs?: number;
  /**
   * Add the marker `metadata: { cyclone_key, cyclone_run_id, cyclone_node }` to creates of
   * collections that take metadata (`METADATA_COLLECTIONS`). Default true. Without it,
   * reconciliation past the replay window cannot find anything.
   */
  metadata?: boolean;
}

/** Call counters per handler attempt (`ctx`) and wrapper scope, so keys follow call order. */
const counters = new WeakMap<Context, Map<string, number>>();

function nextCall(ctx: Context, scope: string | undefined): number {
  let m = counters.get(ctx);
  if (!m) {
    m = new Map();
    counters.set(ctx, m);
  }
  const k = scope ?? '';
  const n = (m.get(k) ?? 0) + 1;
  m.set(k, n);
  return n;
}

/** The caller's own key: `options.idempotencyKey`, or an `Idempotency-Key` header (any case). */
function callerKeyOf(options: Record<string, unknown> | undefined): string | undefined {
  if (!options) return undefined;
  if (typeof options.idempotencyKey === 'string' && options.idempotencyKey !== '') {
    return options.idempotencyKey;
  }
  const headers = options.headers as Record<string, unknown> | undefined;
  for (const [name, value] of Object.entries(headers ?? {})) {
    if (name.toLowerCase() === 'idempotency-key' && typeof value === 'string' && value !== '') {
      return value;
    }
  }
  return undefined;
}

/** The caller's options with our key (and its header removed, so ours is the one sent). */
function withKey(
  options: Record<string, unknown> | undefined,
  key: string,
  timeoutMs: number | undefined,
): Record<string, unknown> {
  const out: Record<string, unknown> = { ...(options ?? {}), idempotencyKey: key };
  const headers = options?.headers as Record<string, string> | undefined;
  if (headers) {
    out.headers = Object.fromEntries(
      Object.entries(headers).filter(([n]) => n.toLowerCase() !== 'idempotency-key'),
    );
  }
  if (timeoutMs !== undefined && out.timeout === undefined) out.timeout = timeoutMs;
  return out;
}

/** `params` with the marker merged into `metadata` (ours win), when the object has room. */
function withMarker(
  params: Record<string, unknown>,
  marker: Record<string, string>,
): Record<string, unknown> {
  const meta = params.metadata;
  if (meta !== undefined && (meta === null || typeof meta !== 'object' || Array.isArray(meta))) {
    return params;
  }
  const mine = (meta ?? {}) as Record<string, unknown>;
  const merged = { ...mine, ...marker };
  if (Object.keys(merged).length > MAX_METADATA_KEYS) return params;
  return { ...params, metadata: merged };
}

/** The collection of a create call (`/v1/payment_intents`), or undefined for other paths. */
function collectionOf(path: string): string {
  const p = path.split('?')[0] ?? path;
  return p.endsWith('/') ? p.slice(0, -1) : p;
}

function is5xx(err: unknown): boolean {
  const s = (err as { statusCode?: unknown } | null)?.statusCode;
  return typeof s === 'number' && s >= 500;
}

/**
 * A synthetic `lastResponse` for a result replayed from the ledger (no HTTP request was made);
 * `idempotencyKey` is the generation-0 key (the ledger does not say which generation succeeded).
 */
/**
 * The definitive failure (402 with the decline's code) of a confirming create whose object the
 * marker lookup found with a failed confirmation; the ledger records it `failed`.
 * @param context what led to the lookup, the message's first clause.
 */
function declinedError(
  collection: string,
  object: Record<string, unknown>,
  declined: NonNullable<ReturnType<typeof failedConfirmation>>,
  context: string,
  cause?: unknown,
): OutcomeError {
  return new OutcomeError(
    {
      kind: 'definitive',
      status: 402,
      ...(declined.code !== undefined ? { code: declined.code } : {}),
      reason: `the ${collection} object under this key records a failed confirmation${declined.code ? ` (${declined.code})` : ''}`,
    },
    `${context}; ${String(object.id)} carries the key and records a failed confirmation: ${declined.code ?? 'error'}${declined.declineCode ? ` (${declined.declineCode})` : ''}: ${declined.message}`,
    cause === undefined ? undefined : { cause },
  );
}

function ledgerResponse(key: string) {
  return {
    headers: { 'cyclone-replayed': 'ledger' },
    requestId: '',
    statusCode: 200,
    idempotencyKey: key,
  };
}

/**
 * Wraps the official Stripe client for one handler attempt. The result has
 * the client's own type and surface: resources, nested resources (`stripe.billing.meters`),
 * `rawRequest`, events and configuration. GET and DELETE requests (retrieve, list, search,
 * auto-pagination) go to Stripe untouched. Every POST request:
 *
 * - carries an `Idempotency-Key`: `${runId}:${node}` for the attempt's first
 *   mutating call, `${runId}:${node}:call2`, `…:call3` for the next ones in call order (or the
 *   wrapper's `scope`, see `IdempotentStripeOptions.scope`), `#g<n>` appended after an operator
 *   retry of a definitive failure, and keys over 255 characters cut to 189 characters plus
 *   `#h` and the SHA-256 of the whole key. A request that passes its own `idempotencyKey`
 *   keeps it (and is keyed in the ledger by it); its other request options are kept as given.
 * - runs under `once` of `@cyclone/idempotency`: a `succeeded` ledger row returns the stored
 *   Stripe object with no HTTP request, at any age (past Stripe's 24 h window too); a different
 *   request under the same key is an `IdempotencyMismatchError` with no call; an unknown outcome
 *   follows `onUnknown` (default `'reconcile'`).
 * - is classified on failure (`classifyStripeError`): `StripeIdempotencyError` →
 *   `IdempotencyMismatchError` (non-retryable); 409 / `idempotency_key_in_use` →
 *   `IdempotencyConflictError` (retryable, same key); 402 / 400 / 401 / 403 / 404 →
 *   `DefinitiveFailureError` (non-retryable, recorded; `client.retry` then sends generation
 *   `#g1`); connection errors and 5xx → `AmbiguousOutcomeError` (retryable); refused
 *   connections → `NotSentError` (retryable); 429 → `RateLimitedError`: recorded as not sent
 *   and the step snoozes until the time its `Retry-After` names (else `rateLimitBackoffMs`),
 *   without using an attempt, then sends again with the same key. Each has the Stripe error as
 *   `cause`.
 * - gets `metadata.cyclone_key` (the key sent), `cyclone_run_id` and `cyclone_node` when it
 *   creates an object of a collection that takes metadata (`METADATA_COLLECTIONS`).
 *
 * The returned objects are the JSON of Stripe's answer (the same on a replay from the ledger)
 * with `lastResponse` attached; after a ledger replay `lastResponse.headers['cyclone-replayed']`
 * is `'ledger'` and `requestId` is empty.
 *
 * @param stripe a `Stripe` instance (not changed; share it across handlers).
 * @param ctx the handler's context.
 * @throws IdempotencyKeyError for an invalid `options.scope`.
 */
export function idempotentStripe<S extends Stripe>(
  stripe: S,
  ctx: Context,
  options: IdempotentStripeOptions = {},
): S {
  if (options.scope !== undefined) idempotencyKey(ctx, options.scope); // validates the scope
  installDeadline(stripe);
  const policy = options.onUnknown ?? 'reconcile';
  const windowMs = options.replayWindowMs ?? DEFAULT_REPLAY_WINDOW_MS;
  const raw = stripe as unknown as {
    rawRequest(method: string, path: string, params?: unknown, options?: unknown): Promise<unknown>;
  };
  const get = (path: string) => raw.rawRequest('GET', path);

  const guard = async (
    call: MutatingCall,
    n: number | undefined,
    callerKey: string | undefined,
  ) => {
    const scope =
      callerKey !== undefined ? callerKeyScope(callerKey) : callScope(options.scope, n ?? 1);
    const collection = collectionOf(call.path);
    const marked = options.metadata !== false && METADATA_COLLECTIONS.has(collection);
    const reconcilable = marked && RECONCILABLE_COLLECTIONS.has(collection);
    const account = call.options?.stripeAccount ?? call.options?.stripeContext ?? null;

    const onUnknown =
      policy === 'reconcile'
        ? async (key: string, info: ReconcileInfo) => {
            const started = info.callStartedAt?.getTime();
            if (started === undefined || Date.now() - started < windowMs) return undefined;
            if (!reconcilable) {
              throw new UnknownOutcomeError(
                info.ledgerKey,
                info.ownerAttempt,
                info.callStartedAt,
                `past Stripe's key window, and ${call.method} ${call.path} cannot be reconciled by listing`,
              );
            }
            const found = await findByMarker(get, collection, key, started / 1000);
            if (found.found === 'one') {
              const declined = failedConfirmation(collection, call.params, found.object);
              if (declined === undefined) return found.object;
              throw declinedError(
                collection,
                found.object,
                declined,
                `past Stripe's key window, the list found the object under key ${key}`,
              );
            }
            if (found.found === 'none') return undefined;
            throw new UnknownOutcomeError(
              info.ledgerKey,
              info.ownerAttempt,
              info.callStartedAt,
              found.found === 'many'
                ? `several objects carry metadata.cyclone_key ${key}: ${found.ids.join(', ')}`
                : 'too many objects to list since the call',
            );
          }
        : policy;

    let live: { lastResponse?: unknown } | undefined;
    let sentKey = '';
    const result = await once<unknown>(
      ctx,
      {
        scope,
        request: { method: call.method, path: call.path, params: call.params, account },
        provider: 'stripe',
        operation: `${call.method} ${call.path}`.slice(0, 200),
        onUnknown,
        quietPeriodMs: options.quietPeriodMs ?? 0,
        classify: classifyStripeError,
        maxKeyLength: MAX_STRIPE_KEY_LENGTH,
        reference: (r) => {
          const id = (r as { id?: unknown } | null)?.id;
          return typeof id === 'string' ? id : null;
        },
      },
      async (key, info) => {
        sentKey = callerKey !== undefined ? callerStripeKey(callerKey, info.generation) : key;
        const params = marked
          ? withMarker(call.params, markerMetadata(sentKey, ctx.runId, ctx.node))
          : call.params;
        try {
          const res = (await call.send(
            params,
            withKey(call.options, sentKey, options.timeoutMs),
          )) as {
            lastResponse?: unknown;
          };
          live = res;
          return res;
        } catch (err) {
          // Stripe stores an executed 5xx under the key and replays it: a re-sent call that gets
          // a 5xx again must not loop on the stored answer. Look for the object instead.
          if (info.recall && is5xx(err) && reconcilable) {
            // Since 26 h ago: the default policy re-sends only within the 23 h replay window.
            const since = Date.now() / 1000 - 26 * 3600;
            const found = await findByMarker(get, collection, sentKey, since);
            if (found.found === 'one') {
              // A confirming create that declined leaves its object behind (status
              // requires_payment_method, last_payment_error): the call failed, it did not succeed.
              const declined = failedConfirmation(collection, call.params, found.object);
              if (declined === undefined) return found.object;
              throw declinedError(
                collection,
                found.object,
                declined,
                `Stripe answers ${String((err as { statusCode: number }).statusCode)} again under key ${sentKey} (its stored response)`,
                err,
              );
            }
            if (found.found === 'none') {
              throw new OutcomeError(
                {
                  kind: 'definitive',
                  status: (err as { statusCode: number }).statusCode,
                  reason: 'Stripe replays a stored 5xx for this key and no object carries it',
                },
                `Stripe answers ${String((err as { statusCode: number }).statusCode)} again under key ${sentKey} (its stored response) and no ${collection} object carries metadata.cyclone_key ${sentKey}: nothing was created. Retry the step (client.retry) to send a fresh key generation.`,
                { cause: err },
              );
            }
          }
          throw err;
        }
      },
    );
    if (result !== null && typeof result === 'object') {
      const replayedKey =
        sentKey ||
        (callerKey !== undefined
          ? callerKey
          : boundKey(idempotencyKey(ctx, scope), MAX_STRIPE_KEY_LENGTH));
      const lastResponse = live?.lastResponse ?? ledgerResponse(replayedKey);
      Object.defineProperty(result, 'lastResponse', {
        value: lastResponse,
        enumerable: false,
        writable: false,
        configurable: true,
      });
    }
    return result;
  };

  return interceptStripe(stripe, (call) => {
    // Numbered synchronously, at the moment the SDK method is called: call order, not
    // completion order, decides the keys.
    const callerKey = callerKeyOf(call.options);
    const n = callerKey === undefined ? nextCall(ctx, options.scope) : undefined;
    return guard(call, n, callerKey);
  });
}
