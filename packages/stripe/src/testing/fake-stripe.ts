/**
 * `FakeStripe`: a local stand-in for the Stripe v1 API subset Cyclone's adapter and apps use,
 * on `127.0.0.1` port 0. It keeps Stripe's idempotency semantics, answers with error bodies the
 * real `stripe` SDK turns into its error classes, records every request, counts real effects,
 * and injects the faults of `@cyclone/idempotency/testing` (`LoopbackFake`, whose recording,
 * fault queue and refused connections it uses), plus Stripe's own `hold`.
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
import type { IncomingHttpHeaders } from 'node:http';
import {
  type Exchange,
  LoopbackFake,
  type RecordedRequest as LoopbackRecordedRequest,
} from '@cyclone/idempotency/testing';
import Stripe from 'stripe';
import {
  type FaultHandle,
  type RecordedRequest,
  type RequestOutcome,
  type StripeFault,
  type StripeFaultOptions,
  type StripeStatusFault,
  stageOf,
} from './faults.js';
import { canonical, decodeForm } from './form.js';
import {
  ApiFailure,
  defaultStripeError,
  type Effect,
  type EffectType,
  newStore,
  type ResourceStore,
  type StripeErrorBody,
  type StripeObject,
} from './resources/objects.js';
import type { RouteResult } from './resources/resource.js';
import { route, routeNameOf, type StripeRoute } from './resources/routes.js';

/** Stripe's documented floor for keeping idempotency keys: 24 hours, in ms. */
export const STRIPE_IDEMPOTENCY_RETENTION_MS = 24 * 60 * 60 * 1000;

/** The API version the fake reports when the request names none (stripe-node 23.1.0's pin). */
export const FAKE_API_VERSION = '2026-10-28.endive';

/** Options of `FakeStripe.start`. */
export interface FakeStripeOptions {
  /** Port to listen on. Default 0 (any free port). */
  port?: number;
  /** How long keys are kept, ms on the fake's clock. Default 24 h. */
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

/** Where a held request waits until its fault is released. */
interface Gate {
  released: boolean;
  waiters: (() => void)[];
}

/** The body text of an injected `status`: its own `body`, else Stripe's error for the status. */
function faultBody(f: StripeStatusFault): string {
  if (f.body === undefined) return errorJson(defaultStripeError(f.status));
  return typeof f.body === 'string' ? f.body : JSON.stringify(f.body, null, 2);
}

function header(headers: IncomingHttpHeaders, name: string): string | undefined {
  const v = headers[name];
  return Array.isArray(v) ? v.join(', ') : v;
}

/**
 * A local fake of the Stripe v1 API subset (payment intents, refunds, customers: create,
 * retrieve, list). Start it with `FakeStripe.start()`, point the real SDK at it with
 * `fake.client()` or `new Stripe(key, fake.config())`, and stop it with `close()`.
 */
export class FakeStripe extends LoopbackFake<StripeRoute, StripeFault, RecordedRequest> {
  /** Every real effect in order (objects created, charges made). */
  readonly effects: Effect[] = [];
  /** Always `127.0.0.1`. */
  readonly host = '127.0.0.1';
  private readonly keys = new Map<string, StoredResponse>();
  private readonly gates = new Map<StripeFault, Gate>();
  private readonly store: ResourceStore = newStore();
  private readonly retentionMs: number;
  private readonly listeners = new Set<() => void>();
  private clockOffsetMs = 0;

  private constructor(options: FakeStripeOptions) {
    super('any', {
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
    this.retentionMs = options.idempotencyRetentionMs ?? STRIPE_IDEMPOTENCY_RETENTION_MS;
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

  /** `http://127.0.0.1:<port>`. */
  get url(): string {
    return this.origin;
  }

  /**
   * The `stripe` constructor config that points the SDK at this fake: `host`, `port`,
   * `protocol: 'http'`, `telemetry: false`, plus `extra` (e.g. `maxNetworkRetries`, `timeout`).
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
   * Injects a fault for the next matching request(s) (default: any request; see `StripeFault`
   * for the stage where each applies). Faults are tried in the order they were added, per stage;
   * the first unspent match wins.
   */
  override inject(f: StripeFault, options: StripeFaultOptions = {}): FaultHandle {
    // A copy, so that each injection has a gate of its own even for a shared fault object.
    const fault = { ...f };
    const gate: Gate = { released: false, waiters: [] };
    this.gates.set(fault, gate);
    const { idempotencyKey: key, match, ...rest } = options;
    const handle = super.inject(fault, {
      ...rest,
      ...(key === undefined && match === undefined
        ? {}
        : {
            match: (r: RecordedRequest) =>
              (key === undefined ||
                (r.idempotencyKey !== undefined && matches(key, r.idempotencyKey))) &&
              (match === undefined || match(r)),
          }),
    });
    const release = () => {
      gate.released = true;
      for (const w of gate.waiters.splice(0)) w();
    };
    return {
      get hits() {
        return handle.hits;
      },
      waitForHit: (n, timeoutMs) => handle.waitForHit(n, timeoutMs),
      release,
      remove: () => {
        handle.remove();
        release();
      },
    };
  }

  /** Removes every injected fault (releasing held requests). */
  override clearFaults(): void {
    super.clearFaults();
    for (const gate of this.gates.values()) {
      gate.released = true;
      for (const w of gate.waiters.splice(0)) w();
    }
    this.gates.clear();
  }

  /** Stops the server, drops every connection and releases held requests. Idempotent. */
  override async close(): Promise<void> {
    this.clearFaults();
    await super.close();
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

  /** The routes of the subset (`payment_intents.create`, …); anything else is `unknown`. */
  protected routeOf(method: string, path: string): StripeRoute | 'unknown' {
    return routeNameOf(method, path);
  }

  /** Stripe's fields of a record: parameters, key, API key, and an outcome still `pending`. */
  protected override recordOf(base: LoopbackRecordedRequest<StripeFault['kind']>): RecordedRequest {
    const auth = header(base.headers, 'authorization') ?? '';
    return {
      ...base,
      params: decodeForm(base.method === 'POST' ? base.rawBody : base.query.toString()),
      idempotencyKey: header(base.headers, 'idempotency-key'),
      apiKey: auth.startsWith('Bearer ') ? auth.slice(7) : undefined,
      status: undefined,
      outcome: 'pending',
      requestId: `req_${randomBytes(7).toString('hex')}`,
    };
  }

  /** Only the faults of the arrival stage, on any request (unknown routes included). */
  protected override faultOnArrival(
    route: StripeRoute | 'unknown',
    request: RecordedRequest,
  ): StripeFault | undefined {
    return this.takeFault(route, request, (f) => stageOf(f) === 'arrival');
  }

  /** Requests are recorded on the fake's clock (`advanceTime` moves it). */
  protected override clock(): Date {
    return new Date(this.now());
  }

  private notify(): void {
    for (const l of [...this.listeners]) l();
  }

  /** One request through Stripe's layers: arrival, authentication, idempotency, execution. */
  protected async handle(
    routeName: StripeRoute | 'unknown',
    ex: Exchange<StripeFault, RecordedRequest>,
  ): Promise<void> {
    const rec = ex.request;
    this.notify();

    const baseHeaders: Record<string, string> = {
      'content-type': 'application/json',
      'request-id': rec.requestId,
      'stripe-version': header(rec.headers, 'stripe-version') ?? FAKE_API_VERSION,
    };
    if (rec.idempotencyKey !== undefined) baseHeaders['idempotency-key'] = rec.idempotencyKey;

    const write = (status: number, body: string, extra: Record<string, string>) => {
      if (ex.respond({ status, headers: { ...baseHeaders, ...extra }, body })) rec.status = status;
      this.notify();
    };
    /** Answers, unless a response fault (reset, delay) applies to this answer. */
    const send = async (
      status: number,
      body: string,
      outcome: RequestOutcome,
      extra: Record<string, string> = {},
    ): Promise<void> => {
      rec.outcome = outcome;
      const f = this.takeFault(routeName, rec, (x) => stageOf(x) === 'response');
      if (f?.kind === 'reset') {
        rec.outcome = 'fault';
        ex.destroy();
        this.notify();
        return;
      }
      if (f?.kind === 'delay') {
        rec.outcome = 'fault';
        await ex.sleep(f.ms);
      }
      write(status, body, extra);
    };
    const sendError = (status: number, error: StripeErrorBody, outcome: RequestOutcome) =>
      send(status, errorJson(error), outcome);
    const answerNow = (
      status: number,
      body: string,
      outcome: RequestOutcome,
      extra: Record<string, string> = {},
    ) => {
      rec.outcome = outcome;
      write(status, body, extra);
    };

    // Stage 1: arrival (in front of the idempotency layer, nothing stored).
    const arrival = ex.fault;
    if (arrival?.kind === 'reset') {
      rec.outcome = 'refused';
      ex.destroy();
      this.notify();
      return;
    }
    if (arrival?.kind === 'status') {
      return answerNow(arrival.status, faultBody(arrival), 'fault', arrival.headers);
    }
    if (arrival?.kind === 'delay') await ex.sleep(arrival.ms);
    if (!rec.apiKey || !/^[sr]k_/.test(rec.apiKey)) {
      return answerNow(
        401,
        errorJson({
          type: 'invalid_request_error',
          message:
            'You did not provide an API key. You need to provide your API key in the Authorization header, using Bearer auth.',
        }),
        'unauthorized',
      );
    }

    // Stage 2: the idempotency layer (POST only; a key has no effect on GET).
    const keyed = rec.method === 'POST' && rec.idempotencyKey !== undefined;
    const storeKey = `${rec.apiKey}\u0000${rec.idempotencyKey ?? ''}`;
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
        return sendError(409, defaultStripeError(409), 'conflict');
      }
      if (found) {
        if (
          found.method !== rec.method ||
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
        method: rec.method,
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
    const f = this.takeFault(routeName, rec, (x) => stageOf(x) === 'execution');
    const gate = f?.kind === 'hold' ? this.gates.get(f) : undefined;
    if (gate && !gate.released) {
      await new Promise<void>((r) => gate.waiters.push(r));
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
    if (f?.kind === 'status') {
      if (f.commit) {
        try {
          commitEffects(this.run(rec).effects);
        } catch (err) {
          commitEffects(effectsOf(err));
        }
      }
      status = f.status;
      body = faultBody(f);
      outcome = 'fault';
      Object.assign(extra, f.headers);
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

/** `{ "error": {...} }`: without the `error` object the SDK would take a failure for a success. */
function errorJson(error: StripeErrorBody): string {
  const clean = Object.fromEntries(Object.entries(error).filter(([, v]) => v !== undefined));
  return JSON.stringify({ error: clean }, null, 2);
}

function effectsOf(err: unknown): RouteResult['effects'] {
  const e = (err as { effects?: RouteResult['effects'] }).effects;
  return Array.isArray(e) ? e : [];
}
