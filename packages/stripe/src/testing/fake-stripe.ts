/**
 * `FakeStripe`: a local stand-in for the Stripe v1 API subset Cyclone's adapter and apps use,
 * on `127.0.0.1` port 0 (PROVIDERS.md § 5, § 5.1). It keeps Stripe's idempotency semantics
 * (§ 1.2), answers with error bodies the real `stripe` SDK turns into its error classes (§ 1.4),
 * records every request, counts real effects, and injects faults: a dropped connection after the
 * effect, a response delayed past the client's timeout, error statuses, a request refused
 * before the effect, a request held in flight.
 *
 * Idempotency, as emulated (keyed by the `Idempotency-Key` header, scoped by API key):
 * - first sight of a key on a POST: the key is claimed *in flight*, the request executes, and
 *   its status and body are stored once execution began (successes, executed 4xx such as a card
 *   decline, and 5xx);
 * - the same key while in flight: `409` `idempotency_key_in_use`, not stored;
 * - the same key, method, path and parameters after completion: the stored status and body,
 *   byte for byte, with `idempotent-replayed: true` and `original-request`;
 * - the same key with other parameters or another endpoint: `400` `idempotency_error`;
 * - not stored, so a retry really runs again: validation failures, 401, 429, and faults marked
 *   as not executed;
 * - keys older than the retention (24 h by default, on the fake's clock, see `advanceTime`) are
 *   pruned: a reuse then runs as a brand-new request.
 */
import { randomBytes } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { LoopbackHttpServer } from '@cyclone/idempotency/testing';
import Stripe from 'stripe';
import { canonical, decodeForm, type FormParams } from './form.js';
import {
  ApiFailure,
  type Effect,
  type EffectType,
  newStore,
  type ResourceStore,
  type StripeErrorBody,
  type StripeObject,
} from './resources/objects.js';
import type { RouteResult } from './resources/resource.js';
import { route } from './resources/routes.js';

/** Stripe's documented floor for keeping idempotency keys: 24 hours, in ms (PROVIDERS.md § 1.2). */
export const STRIPE_IDEMPOTENCY_RETENTION_MS = 24 * 60 * 60 * 1000;

/** The API version the fake reports when the request names none (stripe-node 23.1.0's pin). */
export const FAKE_API_VERSION = '2026-10-28.endive';

/**
 * A fault to inject. Each applies at the stage where it happens in real life:
 * - `refuse`: on arrival, before the idempotency layer: the socket is destroyed, nothing runs,
 *   nothing is stored (the client sees `ECONNRESET`). For a refused *connection*
 *   (`ECONNREFUSED`) use `FakeStripe.suspend()`.
 * - `error` with `executed: false` (the default for 401, 429 and other 4xx): answered on arrival,
 *   before the idempotency layer, not stored.
 * - `error` with `executed: true` (the default for 402 and 5xx): answered after the key is
 *   claimed; with `commit: true` the effect happens first (a 500 after the charge). The response
 *   is stored under the key and replayed.
 * - `drop_after_effect`: applies to the answer: whatever the request did (executed and stored,
 *   replayed, 409, …) is done, then the socket is destroyed instead of answering: the "lost
 *   response".
 * - `delay_after_effect`: applies to the answer likewise: the work is done (and stored), then the
 *   answer waits `ms` (past the client's timeout, the client gives up).
 * - `hold`: the key is claimed in flight and the request waits for `FaultHandle.release()`, then
 *   executes normally. Meanwhile the same key gets `409`.
 */
export type Fault =
  | { type: 'refuse' }
  | {
      type: 'error';
      /** HTTP status. */
      status: number;
      /** The `error` object; defaults per status (`api_error` for 5xx, `rate_limit` for 429, …). */
      error?: Partial<StripeErrorBody>;
      /** Whether the request reached execution (stored and replayed). Default: 402 and ≥ 500. */
      executed?: boolean;
      /** With `executed`: perform the real effect before failing. Default false. */
      commit?: boolean;
      /** Sends `Stripe-Should-Retry: true|false`, which steers the SDK's own retries. */
      shouldRetry?: boolean;
    }
  | { type: 'drop_after_effect' }
  | { type: 'delay_after_effect' /** Delay of the answer, ms. */; ms: number }
  | { type: 'hold' };

/** Which requests a fault applies to; every given field must match. */
export interface FaultMatch {
  /** `GET` or `POST`. Default: any. */
  method?: string;
  /** The path without query (`/v1/payment_intents`), exact or a RegExp. Default: any. */
  path?: string | RegExp;
  /** The `Idempotency-Key`, exact or a RegExp. Default: any. */
  idempotencyKey?: string | RegExp;
}

/** A fault rule: a fault, its match, and how many requests it hits. */
export interface FaultRule extends FaultMatch {
  fault: Fault;
  /** Requests it applies to before it is spent. Default 1; `Infinity` for every one. */
  times?: number;
}

/** Control of an injected fault. */
export interface FaultHandle {
  /** Requests the fault has hit so far. */
  readonly hits: number;
  /** Resolves once the fault has hit `n` requests (default 1). @throws after `timeoutMs`. */
  waitForHit(n?: number, timeoutMs?: number): Promise<void>;
  /** For `hold`: lets held requests (and later ones) go on. */
  release(): void;
  /** Withdraws the rule (held requests are released). */
  remove(): void;
}

/**
 * What happened to a recorded request: `pending` (not answered yet, e.g. held), `executed` (ran;
 * a success or an executed, stored failure such as a decline), `replayed` (the stored response
 * of its key), `conflict` (409, key in flight), `idempotency_mismatch` (400, key used with other
 * parameters), `invalid` (a validation error, not stored), `unauthorized` (401), `fault` (an
 * injected error, drop or delay decided the answer), `refused` (socket destroyed on arrival).
 */
export type RequestOutcome =
  | 'pending'
  | 'executed'
  | 'replayed'
  | 'conflict'
  | 'idempotency_mismatch'
  | 'invalid'
  | 'unauthorized'
  | 'fault'
  | 'refused';

/** One request as the fake saw it. */
export interface RecordedRequest {
  /** 1, 2, 3, … in arrival order. */
  seq: number;
  method: string;
  /** Path without the query string. */
  path: string;
  /** The raw query string without `?` (empty when none). */
  query: string;
  /** Request headers, lower-cased names. */
  headers: Record<string, string>;
  /** The raw body as received. */
  rawBody: string;
  /** Decoded parameters (body for POST, query for GET). */
  params: FormParams;
  /** The `Idempotency-Key` header, if any. */
  idempotencyKey: string | undefined;
  /** The bearer API key, if any. */
  apiKey: string | undefined;
  /** The status answered; undefined when the socket was dropped or the request is still open. */
  status: number | undefined;
  outcome: RequestOutcome;
  /** The fake's `request-id` of this request. */
  requestId: string;
  /** Arrival time on the fake's clock (ms). */
  at: number;
}

/** Options of `FakeStripe.start`. */
export interface FakeStripeOptions {
  /** Port to listen on. Default 0 (any free port). */
  port?: number;
  /** How long keys are kept, ms on the fake's clock. Default 24 h (PROVIDERS.md § 1.2). */
  idempotencyRetentionMs?: number;
}

interface StoredResponse {
  method: string;
  path: string;
  params: string;
  state: 'in_flight' | 'done';
  status: number;
  body: string;
  headers: Record<string, string>;
  requestId: string;
  createdAt: number;
}

interface Rule extends FaultRule {
  hits: number;
  released: boolean;
  waiters: (() => void)[];
  hitWaiters: { n: number; resolve: () => void }[];
}

type Stage = 'arrival' | 'execution' | 'response';

/** Where a fault applies (see `Fault`). */
function stageOf(f: Fault): Stage {
  if (f.type === 'refuse' || (f.type === 'error' && !isExecuted(f))) return 'arrival';
  if (f.type === 'drop_after_effect' || f.type === 'delay_after_effect') return 'response';
  return 'execution';
}

function isExecuted(f: Extract<Fault, { type: 'error' }>): boolean {
  return f.executed ?? (f.status === 402 || f.status >= 500);
}

function defaultError(status: number): StripeErrorBody {
  if (status === 401) {
    return { type: 'invalid_request_error', message: 'Invalid API Key provided: sk_test_***' };
  }
  if (status === 402) {
    return {
      type: 'card_error',
      code: 'card_declined',
      decline_code: 'generic_decline',
      message: 'Your card was declined.',
    };
  }
  if (status === 409) {
    return {
      type: 'invalid_request_error',
      code: 'idempotency_key_in_use',
      message:
        'There is currently another in-progress request using this Idempotent Key (that probably means you submitted twice, and the other request is still going through). Please try again later.',
    };
  }
  if (status === 429) {
    return {
      type: 'invalid_request_error',
      code: 'rate_limit',
      message: 'Too many requests hit the API too quickly.',
    };
  }
  if (status >= 500) {
    return { type: 'api_error', message: 'An unknown error occurred (injected by FakeStripe).' };
  }
  return { type: 'invalid_request_error', message: `Injected error (HTTP ${status}).` };
}

/**
 * A local fake of the Stripe v1 API subset (payment intents, refunds, customers: create,
 * retrieve, list). Start it with `FakeStripe.start()`, point the real SDK at it with
 * `fake.client()` or `new Stripe(key, fake.config())`, and stop it with `close()`.
 */
export class FakeStripe {
  /** Every request in arrival order. */
  readonly requests: RecordedRequest[] = [];
  /** Every real effect in order (objects created, charges made). */
  readonly effects: Effect[] = [];
  /** Always `127.0.0.1`. */
  readonly host = '127.0.0.1';
  private readonly server: LoopbackHttpServer;
  private readonly keys = new Map<string, StoredResponse>();
  private readonly rules: Rule[] = [];
  private readonly store: ResourceStore = newStore();
  private readonly retentionMs: number;
  private readonly listeners = new Set<() => void>();
  private clockOffsetMs = 0;
  private suspended = false;

  private constructor(options: FakeStripeOptions) {
    this.retentionMs = options.idempotencyRetentionMs ?? STRIPE_IDEMPOTENCY_RETENTION_MS;
    this.server = new LoopbackHttpServer((req, res) => this.handle(req, res), {
      // A bug in the fake itself: answer 500 so the test sees it rather than hanging.
      onError: (err, res) => {
        res.writeHead(500, { 'content-type': 'application/json' });
        res.end(
          JSON.stringify({
            error: { type: 'api_error', message: `FakeStripe bug: ${String(err)}` },
          }),
        );
      },
    });
  }

  /**
   * Starts a fake on `127.0.0.1` (port 0 unless `options.port`).
   * @throws the listen error (e.g. `EADDRINUSE` for a fixed port).
   */
  static async start(options: FakeStripeOptions = {}): Promise<FakeStripe> {
    const fake = new FakeStripe(options);
    await fake.server.listen(options.port ?? 0);
    return fake;
  }

  /** The port the fake listens on. */
  get port(): number {
    return this.server.port;
  }

  /** `http://127.0.0.1:<port>`. */
  get url(): string {
    return this.server.origin;
  }

  /**
   * The `stripe` constructor config that points the SDK at this fake (PROVIDERS.md § 1.5):
   * `host`, `port`, `protocol: 'http'`, `telemetry: false`, plus `extra` (e.g.
   * `maxNetworkRetries`, `timeout`).
   */
  config(extra: Stripe.StripeConfig = {}): Stripe.StripeConfig {
    return { host: this.host, port: this.port, protocol: 'http', telemetry: false, ...extra };
  }

  /**
   * A real `Stripe` client pointed at this fake, API key `sk_test_fake` unless `apiKey`.
   * `extra` is passed to the constructor (`maxNetworkRetries`, `timeout`, …).
   */
  client(extra: Stripe.StripeConfig = {}, apiKey = 'sk_test_fake'): Stripe {
    return new Stripe(apiKey, this.config(extra));
  }

  /** The fake's clock in ms (real time plus `advanceTime`). Objects' `created` uses it. */
  now(): number {
    return Date.now() + this.clockOffsetMs;
  }

  /**
   * Moves the fake's clock forward by `ms`: stored keys older than the retention (24 h) are
   * pruned on their next use, and new objects get later `created` times.
   */
  advanceTime(ms: number): void {
    this.clockOffsetMs += ms;
  }

  /** Forgets every stored idempotency key at once (as if 24 h had passed for all of them). */
  pruneIdempotencyKeys(): void {
    for (const [k, v] of this.keys) if (v.state === 'done') this.keys.delete(k);
  }

  /**
   * Injects a fault for the next matching request(s); see `Fault` for where each applies.
   * Rules are tried in the order they were added; the first unspent match wins.
   */
  inject(rule: FaultRule): FaultHandle {
    const r: Rule = { ...rule, hits: 0, released: false, waiters: [], hitWaiters: [] };
    this.rules.push(r);
    const release = () => {
      r.released = true;
      for (const w of r.waiters.splice(0)) w();
    };
    return {
      get hits() {
        return r.hits;
      },
      waitForHit: (n = 1, timeoutMs = 10_000) =>
        r.hits >= n
          ? Promise.resolve()
          : new Promise<void>((resolve, reject) => {
              const t = setTimeout(
                () =>
                  reject(
                    new Error(
                      `FakeStripe: fault ${r.fault.type} hit ${r.hits}/${n} times within ${timeoutMs} ms`,
                    ),
                  ),
                timeoutMs,
              );
              r.hitWaiters.push({
                n,
                resolve: () => {
                  clearTimeout(t);
                  resolve();
                },
              });
            }),
      release,
      remove: () => {
        const i = this.rules.indexOf(r);
        if (i >= 0) this.rules.splice(i, 1);
        release();
      },
    };
  }

  /** Removes every fault rule (releasing held requests). */
  clearFaults(): void {
    for (const r of this.rules.splice(0)) {
      r.released = true;
      for (const w of r.waiters.splice(0)) w();
    }
  }

  /**
   * Stops accepting connections and drops open ones: clients get `ECONNREFUSED` until
   * `resume()` (the "refused before anything was sent" case).
   */
  async suspend(): Promise<void> {
    if (this.suspended) return;
    this.suspended = true;
    await this.server.stopListening(0);
  }

  /** Listens again on the same port after `suspend()`. */
  async resume(): Promise<void> {
    if (!this.suspended) return;
    this.suspended = false;
    await this.server.listen(this.server.port);
  }

  /** Stops the server, drops every connection and releases held requests. Idempotent. */
  async close(): Promise<void> {
    this.clearFaults();
    await this.server.close();
  }

  /** Number of real effects, of one type or all. `count('charge')` counts money taken. */
  count(type?: EffectType): number {
    return type ? this.effects.filter((e) => e.type === type).length : this.effects.length;
  }

  /** Stored objects of a kind, in creation order (copies). */
  objects(kind: 'payment_intent' | 'refund' | 'customer'): StripeObject[] {
    return [...this.store[kind].values()].map((o) => structuredClone(o));
  }

  /** Recorded requests filtered by method and path (exact or RegExp). */
  requestsTo(method: string, path: string | RegExp): RecordedRequest[] {
    return this.requests.filter((r) => r.method === method && matches(path, r.path));
  }

  /**
   * Resolves with the first recorded request (already seen or to come) for which `pred` holds.
   * @throws after `timeoutMs` (default 10 s).
   */
  waitForRequest(
    pred: (r: RecordedRequest) => boolean,
    timeoutMs = 10_000,
  ): Promise<RecordedRequest> {
    return new Promise((resolve, reject) => {
      const check = () => {
        const found = this.requests.find(pred);
        if (found) {
          clearTimeout(t);
          this.listeners.delete(check);
          resolve(found);
        }
      };
      const t = setTimeout(() => {
        this.listeners.delete(check);
        reject(new Error(`FakeStripe: no matching request within ${timeoutMs} ms`));
      }, timeoutMs);
      this.listeners.add(check);
      check();
    });
  }

  private notify(): void {
    for (const l of [...this.listeners]) l();
  }

  private takeRule(rec: RecordedRequest, stage: Stage): Rule | undefined {
    for (const r of this.rules) {
      const spent = r.hits >= (r.times ?? 1);
      if (spent) continue;
      if (stageOf(r.fault) !== stage) continue;
      if (r.method && r.method.toUpperCase() !== rec.method) continue;
      if (r.path !== undefined && !matches(r.path, rec.path)) continue;
      if (r.idempotencyKey !== undefined) {
        if (rec.idempotencyKey === undefined || !matches(r.idempotencyKey, rec.idempotencyKey)) {
          continue;
        }
      }
      r.hits++;
      for (const w of [...r.hitWaiters]) {
        if (r.hits >= w.n) {
          r.hitWaiters.splice(r.hitWaiters.indexOf(w), 1);
          w.resolve();
        }
      }
      return r;
    }
    return undefined;
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const rawBody = Buffer.concat(chunks).toString('utf8');
    const url = new URL(req.url ?? '/', 'http://fake');
    const method = (req.method ?? 'GET').toUpperCase();
    const headers: Record<string, string> = {};
    for (const [k, v] of Object.entries(req.headers)) {
      if (v !== undefined) headers[k] = Array.isArray(v) ? v.join(', ') : v;
    }
    const auth = headers.authorization ?? '';
    const apiKey = auth.startsWith('Bearer ') ? auth.slice(7) : undefined;
    const query = url.search.startsWith('?') ? url.search.slice(1) : '';
    const rec: RecordedRequest = {
      seq: this.requests.length + 1,
      method,
      path: url.pathname,
      query,
      headers,
      rawBody,
      params: decodeForm(method === 'POST' ? rawBody : query),
      idempotencyKey: headers['idempotency-key'],
      apiKey,
      status: undefined,
      outcome: 'pending',
      requestId: `req_${randomBytes(7).toString('hex')}`,
      at: this.now(),
    };
    this.requests.push(rec);
    this.notify();

    const baseHeaders: Record<string, string> = {
      'content-type': 'application/json',
      'request-id': rec.requestId,
      'stripe-version': headers['stripe-version'] ?? FAKE_API_VERSION,
    };
    if (rec.idempotencyKey !== undefined) baseHeaders['idempotency-key'] = rec.idempotencyKey;

    const write = (status: number, body: string, extra: Record<string, string>) => {
      if (!res.destroyed && !res.socket?.destroyed) {
        rec.status = status;
        res.writeHead(status, { ...baseHeaders, ...extra });
        res.end(body);
      }
      this.notify();
    };
    /** Answers, unless a response fault (drop, delay) applies to this answer. */
    const send = async (
      status: number,
      body: string,
      outcome: RequestOutcome,
      extra: Record<string, string> = {},
    ): Promise<void> => {
      rec.outcome = outcome;
      const f = this.takeRule(rec, 'response')?.fault;
      if (f?.type === 'drop_after_effect') {
        rec.outcome = 'fault';
        req.socket.destroy();
        this.notify();
        return;
      }
      if (f?.type === 'delay_after_effect') {
        rec.outcome = 'fault';
        await this.server.sleep(f.ms);
      }
      write(status, body, extra);
    };
    const sendError = (
      status: number,
      error: StripeErrorBody,
      outcome: RequestOutcome,
      extra: Record<string, string> = {},
    ) => send(status, errorJson(error), outcome, extra);
    const answerNow = (
      status: number,
      error: StripeErrorBody,
      outcome: RequestOutcome,
      extra: Record<string, string> = {},
    ) => {
      rec.outcome = outcome;
      write(status, errorJson(error), extra);
    };

    // Stage 1: arrival (in front of the idempotency layer, nothing stored).
    const arrival = this.takeRule(rec, 'arrival');
    if (arrival?.fault.type === 'refuse') {
      rec.outcome = 'refused';
      req.socket.destroy();
      this.notify();
      return;
    }
    if (arrival?.fault.type === 'error') {
      const f = arrival.fault;
      return answerNow(
        f.status,
        { ...defaultError(f.status), ...f.error } as StripeErrorBody,
        'fault',
        retryHeader(f.shouldRetry),
      );
    }
    if (!apiKey || !/^[sr]k_/.test(apiKey)) {
      return answerNow(
        401,
        {
          type: 'invalid_request_error',
          message:
            'You did not provide an API key. You need to provide your API key in the Authorization header, using Bearer auth.',
        },
        'unauthorized',
      );
    }

    // Stage 2: the idempotency layer (POST only; a key has no effect on GET, § 1.2).
    const keyed = method === 'POST' && rec.idempotencyKey !== undefined;
    const storeKey = `${apiKey}\u0000${rec.idempotencyKey ?? ''}`;
    const canonicalParams = canonical(rec.params);
    let entry: StoredResponse | undefined;
    if (keyed) {
      const existing = this.keys.get(storeKey);
      if (
        existing &&
        existing.state === 'done' &&
        this.now() - existing.createdAt >= this.retentionMs
      ) {
        this.keys.delete(storeKey);
      }
      const found = this.keys.get(storeKey);
      if (found?.state === 'in_flight') {
        return sendError(409, defaultError(409), 'conflict');
      }
      if (found) {
        if (
          found.method !== method ||
          found.path !== rec.path ||
          found.params !== canonicalParams
        ) {
          return sendError(
            400,
            {
              type: 'idempotency_error',
              message: `Keys for idempotent requests can only be used with the same parameters they were first used with. Try using a key other than '${rec.idempotencyKey}' if you meant to execute a different request.`,
            },
            'idempotency_mismatch',
          );
        }
        return send(found.status, found.body, 'replayed', {
          ...found.headers,
          'idempotent-replayed': 'true',
          'original-request': found.requestId,
        });
      }
      entry = {
        method,
        path: rec.path,
        params: canonicalParams,
        state: 'in_flight',
        status: 0,
        body: '',
        headers: {},
        requestId: rec.requestId,
        createdAt: this.now(),
      };
      this.keys.set(storeKey, entry);
    }

    // Stage 3: execution.
    const fault = this.takeRule(rec, 'execution');
    if (fault?.fault.type === 'hold' && !fault.released) {
      await new Promise<void>((r) => fault.waiters.push(r));
    }
    let status: number;
    let body: string;
    let stored = true;
    let outcome: RequestOutcome = 'executed';
    const extra: Record<string, string> = {};
    const commitEffects = (effects: RouteResult['effects']) => {
      for (const e of effects) {
        this.effects.push({ ...e, idempotencyKey: rec.idempotencyKey, requestSeq: rec.seq });
      }
    };
    const f = fault?.fault;
    if (f?.type === 'error') {
      if (f.commit) {
        try {
          commitEffects(this.run(rec).effects);
        } catch (err) {
          commitEffects(effectsOf(err));
        }
      }
      status = f.status;
      body = errorJson({ ...defaultError(f.status), ...f.error } as StripeErrorBody);
      outcome = 'fault';
      Object.assign(extra, retryHeader(f.shouldRetry));
    } else {
      try {
        const result = this.run(rec);
        commitEffects(result.effects);
        status = result.status;
        body = JSON.stringify(result.body, null, 2);
      } catch (err) {
        if (!(err instanceof ApiFailure)) throw err;
        commitEffects(effectsOf(err));
        status = err.status;
        body = errorJson(err.body);
        stored = err.stored;
        outcome = err.stored ? 'executed' : 'invalid';
      }
    }
    if (entry) {
      if (stored) {
        Object.assign(entry, { state: 'done', status, body, headers: extra });
      } else {
        this.keys.delete(storeKey);
      }
    }
    return send(status, body, outcome, extra);
  }

  private run(rec: RecordedRequest): RouteResult {
    return route(this.store, {
      method: rec.method,
      path: rec.path,
      params: rec.params,
      nowSeconds: Math.floor(this.now() / 1000),
    });
  }
}

function matches(pattern: string | RegExp, value: string): boolean {
  return typeof pattern === 'string' ? pattern === value : pattern.test(value);
}

function retryHeader(shouldRetry: boolean | undefined): Record<string, string> {
  return shouldRetry === undefined ? {} : { 'stripe-should-retry': String(shouldRetry) };
}

/** `{ "error": {...} }`: without the `error` object the SDK would take a failure for a success (§ 1.4). */
function errorJson(error: StripeErrorBody): string {
  const clean = Object.fromEntries(Object.entries(error).filter(([, v]) => v !== undefined));
  return JSON.stringify({ error: clean }, null, 2);
}

function effectsOf(err: unknown): RouteResult['effects'] {
  const e = (err as { effects?: RouteResult['effects'] }).effects;
  return Array.isArray(e) ? e : [];
}
