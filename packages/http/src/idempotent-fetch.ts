/**
 * `idempotentFetch(ctx, options)`: the platform's `fetch`, for one handler attempt, in which every
 * mutating request carries the step's idempotency key and runs under the durable ledger guard of
 * `@cyclone/idempotency` (`once`): a completed call is replayed from the ledger and never sent
 * again; a lost answer is re-sent with the same key, which the API deduplicates.
 */
import type { Context } from '@cyclone/core';
import {
  deadlineQuietPeriodMs,
  IdempotencyConflictError,
  IdempotencyUsageError,
  idempotencyKey,
  once,
  type Reconcile,
  type ReconcileInfo,
  rateLimitBackoffMs,
  retryAfterMs,
  UnknownOutcomeError,
} from '@cyclone/idempotency';
import {
  bodyDigest,
  checkKeyPlace,
  type PreparedRequest,
  prepareRequest,
  withKey,
} from './body.js';
import { type ClassifySemantics, classifyHttpError } from './classify.js';
import { deadlineFetch } from './deadline-fetch.js';
import { HttpKeyInUseError, HttpResponseError } from './errors.js';
import { callScope, checkKeyLimit, fitKey, formatKey, type KeyFormat } from './keys.js';
import { type HttpPreset, type MismatchRule, type PresetName, presets } from './presets.js';
import {
  DEFAULT_KEPT_HEADERS,
  headersOf,
  type StoredResponse,
  toResponse,
  toStored,
} from './stored-response.js';

/** `fetch`'s signature: what `idempotentFetch` returns. */
export type IdempotentFetch = (
  input: string | URL | Request,
  init?: RequestInit,
) => Promise<Response>;

/**
 * What to do with a call whose answer never arrived (a timeout, a reset, a 5xx, a worker that
 * died mid-call), on a later attempt: `'recall'` re-sends it with the same key (the API answers
 * with the first outcome), `'fail'` discards the step with `UnknownOutcomeError` for an operator,
 * or a reconcile function of yours (`@cyclone/idempotency`'s `Reconcile`; its key is the one
 * sent, fitted to `maxKeyLength`).
 */
export type HttpUnknownPolicy = 'recall' | 'fail' | Reconcile<StoredResponse>;

/** Options of `idempotentFetch`: a preset's fields (each overrides the preset's), and these. */
export interface IdempotentFetchOptions extends Omit<Partial<HttpPreset>, 'name' | 'docs'> {
  /** The API's semantics (`presets.paypal`, or its name). Default: the IETF draft's. */
  preset?: HttpPreset | PresetName;
  /**
   * Scope of the calls made through this wrapper: the first call's ledger key is
   * `${runId}:${node}:${scope}`, the next ones `…:${scope}:call2`, … Without it:
   * `${runId}:${node}`, then `…:call2`, … Visible ASCII without `#`, ≤ 200 characters (minus
   * room for `:callN`).
   */
  scope?: string;
  /**
   * The unknown-outcome policy. Default `'recall'` when the API replays by key (`replaysByKey`,
   * within `keyRetentionMs` when it is known), else `'fail'`.
   */
  onUnknown?: HttpUnknownPolicy;
  /**
   * How long after a call its answer may still arrive; within it a later attempt snoozes instead
   * of applying the policy. Default 0 when the API answers a conflict status for a key in
   * flight, else `timeoutMs` + 5,000 ms (`deadlineQuietPeriodMs`): without `options.fetch`, no
   * byte of a guarded request reaches the API later than `timeoutMs` after it was made (see
   * `deadlineFetch`); with your own `fetch`, that bound is yours to keep.
   */
  quietPeriodMs?: number;
  /**
   * Per-request timeout in ms (with `ctx.signal`), a hard deadline from the request's start
   * (DNS, connect, TLS, the body read whole) after which the socket is reset (`deadlineFetch`).
   * Default 30,000. Keep it below the lease.
   */
  timeoutMs?: number;
  /** Methods that are guarded and keyed; others go to fetch untouched. Default POST and PATCH. */
  methods?: readonly string[];
  /**
   * Request headers that are part of the request's identity (hashed with method, URL, body and
   * `content-type`). Default none: an `Authorization` token that changes between attempts must
   * not turn a retry into a mismatch.
   */
  hashHeaders?: readonly string[];
  /**
   * Which statuses complete the call (stored and replayed as the `Response`); the others are
   * classified (`classifyHttpError`) and thrown. Default: below 400.
   */
  accept?: (status: number) => boolean;
  /**
   * The fetch to call. Default: `deadlineFetch(timeoutMs)` for guarded requests (a hard deadline,
   * the socket reset after it; no redirects followed), `globalThis.fetch` for the others. A
   * `fetch` given here is used for both, and the deadline is then its own.
   */
  fetch?: typeof fetch;
  /** The ledger's provider label. Default: the preset's name, else `http`. */
  provider?: string;
}

/** Default per-request timeout: 30,000 ms. */
export const DEFAULT_TIMEOUT_MS = 30_000;

/** The options resolved once per wrapper. */
interface Resolved {
  scope: string | undefined;
  provider: string;
  where: { header: string } | { field: string };
  keyFormat: KeyFormat;
  maxKeyLength: number | undefined;
  onUnknown: 'recall' | 'fail' | Reconcile<StoredResponse>;
  quietPeriodMs: number;
  timeoutMs: number;
  methods: ReadonlySet<string>;
  hashHeaders: readonly string[];
  keep: ReadonlySet<string>;
  accept: (status: number) => boolean;
  fetch: typeof fetch;
  /** The transport of guarded requests. */
  send: typeof fetch;
  semantics: ClassifySemantics;
}

/** Call counters per handler attempt (`ctx`) and scope, so keys follow call order. */
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

const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

function resolve(ctx: Context, options: IdempotentFetchOptions): Resolved {
  if (options.scope !== undefined) idempotencyKey(ctx, options.scope); // validates the scope
  const base: HttpPreset =
    typeof options.preset === 'string' ? presets[options.preset] : (options.preset ?? DRAFT);
  if (!base) {
    throw new IdempotencyUsageError(
      `unknown preset ${JSON.stringify(options.preset)}; one of ${Object.keys(presets).join(', ')}`,
    );
  }
  const pick = <K extends keyof HttpPreset>(k: K): HttpPreset[K] =>
    (options as HttpPreset)[k] !== undefined ? (options as HttpPreset)[k] : base[k];

  const field = pick('keyField');
  const header = options.keyHeader ?? (options.keyField !== undefined ? undefined : base.keyHeader);
  if (header !== undefined && options.keyField !== undefined) {
    throw new IdempotencyUsageError('give keyHeader or keyField, not both');
  }
  const where: { header: string } | { field: string } =
    header === undefined && field !== undefined
      ? { field }
      : { header: header ?? 'Idempotency-Key' };
  if ('header' in where && !TOKEN.test(where.header)) {
    throw new IdempotencyUsageError(
      `keyHeader ${JSON.stringify(where.header)} is not a header name`,
    );
  }
  if ('field' in where && (typeof where.field !== 'string' || where.field === '')) {
    throw new IdempotencyUsageError('keyField must be a non-empty string');
  }
  const maxKeyLength = pick('maxKeyLength');
  if (maxKeyLength !== undefined) checkKeyLimit(maxKeyLength);
  const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  if (!Number.isInteger(timeoutMs) || timeoutMs < 1) {
    throw new IdempotencyUsageError(`timeoutMs must be an integer ≥ 1, got ${timeoutMs}`);
  }
  const conflictStatuses = pick('conflictStatuses') ?? [409];
  const retention = pick('keyRetentionMs');
  const replays = pick('replaysByKey') ?? true;
  const policy = options.onUnknown ?? (replays ? 'recall' : 'fail');
  if (policy !== 'recall' && policy !== 'fail' && typeof policy !== 'function') {
    throw new IdempotencyUsageError(
      `onUnknown must be 'recall', 'fail' or a reconcile function, got ${JSON.stringify(policy)}`,
    );
  }
  const mismatch: MismatchRule | null =
    options.mismatch !== undefined
      ? options.mismatch
      : base.mismatch === undefined
        ? { statuses: [422] }
        : base.mismatch;
  const keep = new Set(
    [...DEFAULT_KEPT_HEADERS, ...(base.keepHeaders ?? []), ...(options.keepHeaders ?? [])].map(
      (h) => h.toLowerCase(),
    ),
  );
  if ('header' in where) keep.add(where.header.toLowerCase());
  const methods = new Set((options.methods ?? ['POST', 'PATCH']).map((m) => m.toUpperCase()));
  const fetchImpl = options.fetch ?? globalThis.fetch;
  if (typeof fetchImpl !== 'function') {
    throw new IdempotencyUsageError('no fetch: pass options.fetch (Node ≥ 18 has a global one)');
  }
  return {
    scope: options.scope,
    provider: (options.provider ?? (base === DRAFT ? 'http' : base.name)).slice(0, 200),
    where,
    keyFormat: pick('keyFormat') ?? 'token',
    maxKeyLength,
    onUnknown:
      policy === 'recall' && retention !== undefined
        ? recallWithin(replayWindowMs(retention))
        : (policy as Resolved['onUnknown']),
    quietPeriodMs:
      options.quietPeriodMs ?? (conflictStatuses.length > 0 ? 0 : deadlineQuietPeriodMs(timeoutMs)),
    timeoutMs,
    methods,
    hashHeaders: (options.hashHeaders ?? []).map((h) => h.toLowerCase()),
    keep,
    accept: options.accept ?? ((s) => s < 400),
    fetch: fetchImpl,
    send: options.fetch ?? deadlineFetch(timeoutMs),
    semantics: {
      conflictStatuses,
      mismatch,
      storesErrors: pick('storesErrors') ?? false,
      retryAfterStatuses: pick('retryAfterStatuses') ?? [429, 503],
    },
  };
}

/**
 * The semantics without a preset: the IETF draft's, except that the key is a bare token (as the
 * providers send it) and a 5xx is not taken for a stored answer (the draft only says SHOULD).
 */
const DRAFT: HttpPreset = Object.freeze({
  ...presets.ietf,
  name: 'http',
  keyFormat: 'token',
  storesErrors: false,
});

/**
 * How long after a call a re-send is still deduplicated, as counted here: the API's retention
 * less a tenth of it, at most an hour (clock skew between the database, which stamps the call,
 * and the API).
 */
export function replayWindowMs(retentionMs: number): number {
  return retentionMs - Math.min(3_600_000, retentionMs / 10);
}

function duration(ms: number): string {
  if (ms < 120_000) return `${Math.round(ms / 1000)} s`;
  if (ms < 2 * 3_600_000) return `${Math.round(ms / 60_000)} min`;
  return `${Math.round(ms / 3_600_000)} h`;
}

/** Policy `recall` bounded by the replay window: past it, an operator decides. */
function recallWithin(windowMs: number): Reconcile<StoredResponse> {
  return async (_key: string, info: ReconcileInfo) => {
    const started = info.callStartedAt?.getTime();
    if (started === undefined || Date.now() - started < windowMs) return undefined;
    throw new UnknownOutcomeError(
      info.ledgerKey,
      info.ownerAttempt,
      info.callStartedAt,
      `past the ${duration(windowMs)} in which the API still replays its key: a re-send could run again`,
    );
  };
}

/**
 * A `fetch` for one handler attempt whose mutating requests (POST and PATCH by default) are
 * idempotent calls; other methods go to fetch untouched. Each guarded request:
 *
 * - carries a key in `keyHeader` (default `Idempotency-Key`) or in the JSON body field
 *   `keyField`: `${runId}:${node}` for the attempt's first guarded call, `…:call2`, `…:call3`
 *   for the next ones in call order (or the wrapper's `scope`), `#g<n>` appended after an
 *   operator retry of a definitive failure, fitted to `maxKeyLength` (`fitKey`);
 * - runs under `once` of `@cyclone/idempotency`: the request (method, URL, `content-type`,
 *   `hashHeaders`, the SHA-256 of the body) is hashed into the ledger row, so another request
 *   under the same key is an `IdempotencyMismatchError` with no call; a completed call (status
 *   accepted by `accept`, below 400 by default) is stored — status, kept headers
 *   (`DEFAULT_KEPT_HEADERS`, the key header, `keepHeaders`), body — and every later attempt gets
 *   it back as a `Response` with `cyclone-replayed: ledger`, without a request;
 * - on another status throws the classified outcome (`classifyHttpError`) with the
 *   `HttpResponseError` as `cause`: `RateLimitedError` (429, or 503 with `Retry-After`: a
 *   snooze until then, no attempt used), `HttpKeyInUseError` (409: a snooze, then the same key
 *   again), `IdempotencyMismatchError` (422: non-retryable), `DefinitiveFailureError` (another
 *   4xx: non-retryable, replayed until an operator retry sends generation `#g1`),
 *   `AmbiguousOutcomeError` (5xx; a timeout or reset is one too: retried, the unknown-outcome
 *   policy applies);
 * - refuses a streamed, `FormData` or plain-object body (`UnsupportedBodyError`) and a request
 *   that already sets the key, before anything is written.
 *
 * @param ctx the handler's context: create the wrapper inside the handler (it is bound to this
 *   attempt).
 * @throws IdempotencyKeyError / IdempotencyUsageError for bad options, at once.
 */
export function idempotentFetch(
  ctx: Context,
  options: IdempotentFetchOptions = {},
): IdempotentFetch {
  const r = resolve(ctx, options);
  return (input, init) => {
    const method = (
      init?.method ?? (input instanceof Request ? input.method : 'GET')
    ).toUpperCase();
    if (!r.methods.has(method)) return r.fetch(input, init);
    // Numbered now, when fetch is called: call order, not completion order, decides the keys.
    const n = nextCall(ctx, r.scope);
    return guarded(ctx, r, callScope(r.scope, n), input, init);
  };
}

async function guarded(
  ctx: Context,
  r: Resolved,
  scope: string | undefined,
  input: string | URL | Request,
  init: RequestInit | undefined,
): Promise<Response> {
  const req = await prepareRequest(input, init);
  checkKeyPlace(req, r.where);
  const url = new URL(req.url);
  const identity: Record<string, string | null> = {
    'content-type': req.headers.get('content-type'),
  };
  for (const h of r.hashHeaders) identity[h] = req.headers.get(h);
  let live = false;
  try {
    const stored = await once<StoredResponse>(
      ctx,
      {
        ...(scope !== undefined ? { scope } : {}),
        request: {
          method: req.method,
          url: req.url,
          headers: identity,
          body: bodyDigest(req.body),
        },
        provider: r.provider,
        operation: `${req.method} ${url.origin}${url.pathname}`.slice(0, 200),
        onUnknown: fittedPolicy(r),
        quietPeriodMs: r.quietPeriodMs,
        classify: (err) => classifyHttpError(err, r.semantics),
        reference: referenceOf,
      },
      async (key, info) => {
        const sent = fitKey(key, r.maxKeyLength);
        const res = await send(
          r,
          req,
          sent,
          init?.signal ? [info.signal, init.signal] : [info.signal],
        );
        const all = headersOf(res.response);
        const snapshot = toStored(res.response, res.bytes, all, r.keep);
        if (!r.accept(snapshot.status)) {
          throw new HttpResponseError(req.method, snapshot, all, {
            key: sent,
            recall: info.recall,
            call: info.call,
          });
        }
        live = true;
        return snapshot;
      },
    );
    return toResponse(stored, !live);
  } catch (err) {
    throw inFlightSnooze(err) ?? err;
  }
}

/** Sends the request with its key; resolves once the whole body has arrived. */
async function send(
  r: Resolved,
  req: PreparedRequest,
  key: string,
  signals: AbortSignal[],
): Promise<{ response: Response; bytes: Uint8Array }> {
  const placed = withKey(req, 'header' in r.where ? formatKey(key, r.keyFormat) : key, r.where);
  const response = await r.send(req.url, {
    ...req.rest,
    method: req.method,
    headers: placed.headers,
    body: placed.body,
    signal: AbortSignal.any([...signals, AbortSignal.timeout(r.timeoutMs)]),
  });
  // Read whole inside the guarded call: a body cut off is an unknown outcome, not a success.
  const bytes = new Uint8Array(await response.arrayBuffer());
  return { response, bytes };
}

/** A user's reconcile function gets the key as sent (fitted), like the call itself. */
function fittedPolicy(r: Resolved): 'recall' | 'fail' | Reconcile<StoredResponse> {
  const p = r.onUnknown;
  if (typeof p !== 'function' || r.maxKeyLength === undefined) return p;
  return (key, info) =>
    p(fitKey(key, r.maxKeyLength), { ...info, key: fitKey(key, r.maxKeyLength) });
}

/** The provider's reference of an answer: the JSON body's `id`, else a request-id header. */
function referenceOf(s: StoredResponse): string | null {
  if (s.body !== null && s.bodyEncoding === 'utf8' && s.body.length < 65_536) {
    try {
      const id = (JSON.parse(s.body) as { id?: unknown } | null)?.id;
      if (typeof id === 'string' && id !== '') return id.slice(0, 500);
      if (typeof id === 'number') return String(id);
    } catch {
      // not JSON
    }
  }
  return s.headers['request-id'] ?? s.headers['x-request-id'] ?? null;
}

/**
 * The ledger's conflict for an API answer that the key is in flight there, as a snooze: no
 * attempt used; the call stays stamped, so the next attempt applies the policy (a re-send).
 */
function inFlightSnooze(err: unknown): HttpKeyInUseError | undefined {
  if (!IdempotencyConflictError.isInstance(err)) return undefined;
  const cause = (err as Error).cause;
  if (!HttpResponseError.isInstance(cause)) return undefined;
  const res = cause as HttpResponseError;
  const delay = retryAfterMs(res.headers) ?? rateLimitBackoffMs(res.call);
  return new HttpKeyInUseError(res.key, res.status, delay, err);
}
