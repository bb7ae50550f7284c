/**
 * `FakeHttpApi`: a local API that takes an idempotency key, on `127.0.0.1` port 0, with the
 * semantics of a `FakeProfile` (the IETF draft's, or a preset's differences), for tests and
 * demos. Any POST or PATCH creates an object (an effect, counted); a GET reads one back. It
 * records every request and injects the faults of `@cyclone/idempotency/testing` (on
 * `LoopbackFake`: its recording, fault queue and refused connections), plus `hold`.
 *
 * Keys, as emulated (per the profile):
 * - first sight of a key on a POST/PATCH: claimed *in flight*, the request executes, its answer
 *   is stored (a success; an executed error too when the profile `storesErrors`);
 * - the same key while in flight: `409` (`inFlight: 'conflict'`) or a wait for the first answer;
 * - the same key and request after completion: the stored status, headers and body, byte for
 *   byte (with the profile's replay headers);
 * - the same key with another request (method, path or body; a body-field key left out): the
 *   profile's `mismatchStatus`, or the first answer (`onMismatch: 'replay'`);
 * - a key in the wrong format or over the profile's length: `400`;
 * - keys older than the profile's retention (on the fake's clock, `advanceTime`) are forgotten.
 */
import { randomBytes } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import {
  type Exchange,
  type Fault,
  type FaultOptions,
  LoopbackFake,
  type FaultHandle as LoopbackFaultHandle,
  type RecordedRequest as LoopbackRecordedRequest,
  type RouteResponse,
} from '@cyclone/idempotency/testing';
import { errorBody, FAKE_PROFILES, type FakeProfile } from './profiles.js';

/** Routes: `mutate` (POST, PATCH, PUT, DELETE) and `read` (GET, HEAD). */
export type FakeHttpRoute = 'mutate' | 'read';

/**
 * A fault to inject: `@cyclone/idempotency/testing`'s `Fault`, plus `hold`. Each applies where it
 * happens in real life:
 * - `{ kind: 'status' }` without `commit`: on arrival, in front of the key layer (a rate limiter,
 *   a load balancer): nothing runs, nothing is stored. With `commit: true`: after the key is
 *   claimed, the effect happens, then this status is answered (stored when the profile
 *   `storesErrors`).
 * - `{ kind: 'reset', commit: false }`: on arrival, the socket destroyed, nothing runs.
 *   `commit: true`: the request runs (and is stored), then the socket is destroyed instead of
 *   answering: the lost answer. A refused connection is `refuseConnections()`.
 * - `{ kind: 'delay', ms }`: the request runs (and is stored), the answer waits `ms`;
 *   `commit: false`: the wait comes on arrival, before anything runs.
 * - `{ kind: 'hold' }`: the key is claimed in flight and the request waits for
 *   `FaultHandle.release()`, then runs; meanwhile the same key meets the profile's in-flight rule.
 */
export type HttpFault = Fault | { kind: 'hold' };

/** What happened to a recorded request. */
export type RequestOutcome =
  | 'pending'
  | 'executed'
  | 'replayed'
  | 'conflict'
  | 'mismatch'
  | 'invalid'
  | 'read'
  | 'fault'
  | 'refused';

/** One request as the fake saw it: `LoopbackFake`'s record, plus its key and what became of it. */
export interface RecordedRequest extends LoopbackRecordedRequest<HttpFault['kind']> {
  /** The key (unquoted), from the profile's header or body field; undefined without one. */
  key: string | undefined;
  /** The key header's raw value, as sent. */
  rawKey: string | undefined;
  /** The status answered; undefined when the socket was dropped or the request is still open. */
  status: number | undefined;
  outcome: RequestOutcome;
}

/** Which requests a fault applies to: `LoopbackFake`'s conditions, plus the key. */
export interface HttpFaultOptions extends FaultOptions<FakeHttpRoute, RecordedRequest> {
  /** Only requests with this key, exact or a RegExp. */
  key?: string | RegExp;
}

/** Control of an injected fault. */
export interface FaultHandle extends LoopbackFaultHandle {
  /** For `hold`: lets held requests (and later ones) go on. */
  release(): void;
}

/** One effect: an object created (or changed) by an executed request. */
export interface Effect {
  /** The object's id. */
  id: string;
  method: string;
  path: string;
  /** The key the request carried. */
  key: string | undefined;
  /** The JSON body (without a body-field key), or the raw body when it was not JSON. */
  body: unknown;
  /** The request's sequence number. */
  requestSeq: number;
  at: Date;
}

/**
 * What the fake answers an executed request: a status below 400 performs `effect` (counted in
 * `effects`), another one does not. Default: `201` with `{ id, object, …body }` and a
 * `location`.
 */
export type Responder = (request: RecordedRequest, effect: Effect) => RouteResponse;

/** Options of `FakeHttpApi.start`. */
export interface FakeHttpApiOptions {
  /** The API's semantics: a profile or its name. Default `draft` (the IETF draft, bare token). */
  profile?: FakeProfile | keyof typeof FAKE_PROFILES;
  /** Port on 127.0.0.1. Default 0 (a free one). */
  port?: number;
  /** The answer of an executed request. Default: `201` with `{ id, object, …body }`. */
  respond?: Responder;
}

interface Stored {
  fingerprint: string;
  state: 'in_flight' | 'done';
  status: number;
  headers: Record<string, string>;
  body: string;
  createdAt: number;
  waiters: (() => void)[];
}

interface Gate {
  released: boolean;
  waiters: (() => void)[];
}

/** Stages of a request where a fault applies (see `HttpFault`). */
function stageOf(f: HttpFault): 'arrival' | 'execution' | 'response' {
  switch (f.kind) {
    case 'status':
      return f.commit ? 'execution' : 'arrival';
    case 'reset':
      return f.commit ? 'response' : 'arrival';
    case 'delay':
      return f.commit === false ? 'arrival' : 'response';
    case 'hold':
      return 'execution';
  }
}

function header(headers: IncomingHttpHeaders, name: string): string | undefined {
  const v = headers[name.toLowerCase()];
  return Array.isArray(v) ? v.join(', ') : v;
}

/** A value as canonical JSON: object keys sorted, so that key order is not a difference. */
function canonical(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>).sort(([a], [b]) =>
      a < b ? -1 : a > b ? 1 : 0,
    );
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonical(v)}`).join(',')}}`;
  }
  return JSON.stringify(value);
}

/** An RFC 8941 String's content, or undefined when `raw` is not one. */
export function parseSfString(raw: string): string | undefined {
  const m = /^\s*"((?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\["\\])*)"\s*$/.exec(raw);
  return m ? (m[1] as string).replace(/\\(["\\])/g, '$1') : undefined;
}

function matches(pattern: string | RegExp, value: string): boolean {
  return typeof pattern === 'string' ? pattern === value : pattern.test(value);
}

/**
 * A local API that takes an idempotency key. Start it with `FakeHttpApi.start()`, send requests
 * to `fake.url`, count `fake.effects`, stop it with `close()`.
 */
export class FakeHttpApi extends LoopbackFake<FakeHttpRoute, HttpFault, RecordedRequest> {
  /** Every effect, in order. */
  readonly effects: Effect[] = [];
  /** The semantics emulated. */
  readonly profile: FakeProfile;
  private readonly keys = new Map<string, Stored>();
  private readonly objects = new Map<string, unknown>();
  private readonly gates = new Map<HttpFault, Gate>();
  private readonly respond: Responder;
  private readonly listeners = new Set<() => void>();
  private clockOffsetMs = 0;
  private nextId = 0;

  private constructor(options: FakeHttpApiOptions) {
    super('mutate', {
      // A bug in the fake itself: answer 500 so that the test sees it rather than hanging.
      onError: (err, res) => {
        res.writeHead(500, { 'content-type': 'application/problem+json' });
        res.end(JSON.stringify({ title: 'FakeHttpApi bug', detail: String(err) }));
      },
    });
    const p = options.profile ?? 'draft';
    this.profile = typeof p === 'string' ? FAKE_PROFILES[p] : p;
    if (!this.profile) throw new RangeError(`unknown fake profile ${JSON.stringify(p)}`);
    this.respond = options.respond ?? defaultRespond;
  }

  /**
   * Starts a fake on 127.0.0.1 (port 0 unless `options.port`).
   * @throws the listen error (e.g. `EADDRINUSE` for a fixed port).
   */
  static async start(options: FakeHttpApiOptions = {}): Promise<FakeHttpApi> {
    const fake = new FakeHttpApi(options);
    await fake.server.listen(options.port ?? 0);
    return fake;
  }

  /** `http://127.0.0.1:<port>`. */
  get url(): string {
    return this.origin;
  }

  /** The fake's clock in ms (real time plus `advanceTime`). */
  now(): number {
    return Date.now() + this.clockOffsetMs;
  }

  /** Moves the fake's clock forward: keys older than the profile's retention are forgotten. */
  advanceTime(ms: number): void {
    this.clockOffsetMs += ms;
  }

  /** Number of effects, all of them or those carrying `key`. */
  count(key?: string): number {
    return key === undefined
      ? this.effects.length
      : this.effects.filter((e) => e.key === key).length;
  }

  /** The keyed requests (POST, PATCH) the fake received, in order. */
  get keyedRequests(): RecordedRequest[] {
    return this.requests.filter((r) => r.method === 'POST' || r.method === 'PATCH');
  }

  /**
   * Injects a fault for the next matching request(s) (default: the next POST/PATCH/PUT/DELETE;
   * see `HttpFault` for where each applies).
   */
  override inject(f: HttpFault, options: HttpFaultOptions = {}): FaultHandle {
    const fault = { ...f }; // its own gate, even for a shared fault object
    const gate: Gate = { released: false, waiters: [] };
    this.gates.set(fault, gate);
    const { key, match, ...rest } = options;
    const handle = super.inject(fault, {
      ...rest,
      ...(key === undefined && match === undefined
        ? {}
        : {
            match: (r: RecordedRequest) =>
              (key === undefined || (r.key !== undefined && matches(key, r.key))) &&
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

  /** Removes every fault, releasing held requests. */
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
    for (const s of this.keys.values()) for (const w of s.waiters.splice(0)) w();
    await super.close();
  }

  /**
   * Resolves with the first recorded request (seen or to come) for which `pred` holds.
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
        reject(new Error(`FakeHttpApi: no matching request within ${timeoutMs} ms`));
      }, timeoutMs);
      this.listeners.add(check);
      check();
    });
  }

  protected routeOf(method: string): FakeHttpRoute | 'unknown' {
    if (method === 'GET' || method === 'HEAD') return 'read';
    if (['POST', 'PATCH', 'PUT', 'DELETE'].includes(method)) return 'mutate';
    return 'unknown';
  }

  protected override recordOf(base: LoopbackRecordedRequest<HttpFault['kind']>): RecordedRequest {
    const p = this.profile;
    let rawKey: string | undefined;
    let key: string | undefined;
    if (p.keyHeader !== undefined) {
      rawKey = header(base.headers, p.keyHeader);
      key =
        rawKey === undefined
          ? undefined
          : p.keyFormat === 'sf-string'
            ? parseSfString(rawKey)
            : rawKey;
    } else if (p.keyField !== undefined) {
      const v = (base.json as Record<string, unknown> | undefined)?.[p.keyField];
      if (typeof v === 'string') rawKey = key = v;
    }
    return { ...base, key, rawKey, status: undefined, outcome: 'pending' };
  }

  protected override faultOnArrival(
    route: FakeHttpRoute | 'unknown',
    request: RecordedRequest,
  ): HttpFault | undefined {
    return this.takeFault(route, request, (f) => stageOf(f) === 'arrival');
  }

  protected override clock(): Date {
    return new Date(this.now());
  }

  private notify(): void {
    for (const l of [...this.listeners]) l();
  }

  /** The request's identity for the key: method, path and body (a body-field key left out). */
  private fingerprint(rec: RecordedRequest): string {
    let body: string = rec.rawBody;
    if (rec.json !== undefined) {
      const json =
        this.profile.keyField !== undefined &&
        rec.json !== null &&
        typeof rec.json === 'object' &&
        !Array.isArray(rec.json)
          ? Object.fromEntries(
              Object.entries(rec.json as Record<string, unknown>).filter(
                ([k]) => k !== this.profile.keyField,
              ),
            )
          : rec.json;
      body = canonical(json);
    }
    return `${rec.method} ${rec.path}\n${body}`;
  }

  /** One request through the API's layers: arrival, key checks, the key store, execution. */
  protected async handle(
    route: FakeHttpRoute | 'unknown',
    ex: Exchange<HttpFault, RecordedRequest>,
  ): Promise<void> {
    const rec = ex.request;
    const p = this.profile;
    this.notify();
    const baseHeaders: Record<string, string> = {
      'request-id': `req_${randomBytes(6).toString('hex')}`,
    };
    if (p.echoKey && p.keyHeader !== undefined && rec.rawKey !== undefined) {
      baseHeaders[p.keyHeader.toLowerCase()] = rec.rawKey;
    }
    const write = (status: number, body: unknown, extra: Record<string, string> = {}) => {
      const text =
        body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body);
      const type =
        p.name === 'square' || status < 400 ? 'application/json' : 'application/problem+json';
      if (
        ex.respond({
          status,
          headers: { ...(text ? { 'content-type': type } : {}), ...baseHeaders, ...extra },
          ...(text !== undefined ? { body: text } : {}),
        })
      ) {
        rec.status = status;
      }
      this.notify();
    };
    /** Answers, unless a response-stage fault (reset, delay) applies. */
    const send = async (
      status: number,
      body: unknown,
      outcome: RequestOutcome,
      extra: Record<string, string> = {},
    ) => {
      rec.outcome = outcome;
      const f =
        route === 'unknown'
          ? undefined
          : this.takeFault(route, rec, (x) => stageOf(x) === 'response');
      if (f?.kind === 'reset') {
        rec.outcome = 'fault';
        ex.destroy();
        this.notify();
        return;
      }
      if (f?.kind === 'delay') await ex.sleep(f.ms);
      write(status, body, extra);
    };
    const error = (status: number, title: string, detail: string, outcome: RequestOutcome) =>
      send(status, errorBody(p, status, title, detail), outcome);

    // Stage 1: arrival, in front of the key layer (nothing stored).
    const arrival = ex.fault;
    if (arrival?.kind === 'reset') {
      rec.outcome = 'refused';
      ex.destroy();
      this.notify();
      return;
    }
    if (arrival?.kind === 'status') {
      rec.outcome = 'fault';
      write(
        arrival.status,
        arrival.body ?? errorBody(p, arrival.status, `HTTP ${arrival.status}`, 'injected fault'),
        arrival.headers,
      );
      return;
    }
    if (arrival?.kind === 'delay') await ex.sleep(arrival.ms);
    if (route === 'unknown') return error(405, 'METHOD_NOT_ALLOWED', rec.method, 'invalid');
    if (route === 'read') return this.read(rec, send, error);

    // Stage 2: the key layer (POST and PATCH).
    const keyed = rec.method === 'POST' || rec.method === 'PATCH';
    if (keyed && p.keyHeader !== undefined && rec.rawKey !== undefined && rec.key === undefined) {
      return error(
        400,
        'INVALID_IDEMPOTENCY_KEY',
        `${p.keyHeader} must be a Structured Field String ("…")`,
        'invalid',
      );
    }
    if (
      keyed &&
      rec.key !== undefined &&
      p.maxKeyLength !== undefined &&
      rec.key.length > p.maxKeyLength
    ) {
      return error(
        400,
        'INVALID_IDEMPOTENCY_KEY',
        `the idempotency key is longer than ${p.maxKeyLength} characters`,
        'invalid',
      );
    }
    let entry: Stored | undefined;
    if (keyed && rec.key !== undefined) {
      const fp = this.fingerprint(rec);
      for (;;) {
        const found = this.keys.get(rec.key);
        if (
          found?.state === 'done' &&
          p.retentionMs !== undefined &&
          this.now() - found.createdAt >= p.retentionMs
        ) {
          this.keys.delete(rec.key);
          continue;
        }
        if (found?.state === 'in_flight') {
          if (p.inFlight === 'conflict') {
            return error(
              409,
              'IDEMPOTENCY_KEY_IN_PROGRESS',
              'A request with the same idempotency key is being processed',
              'conflict',
            );
          }
          await new Promise<void>((r) => found.waiters.push(r));
          continue;
        }
        if (found) {
          if (found.fingerprint !== fp && p.onMismatch === 'reject') {
            return error(
              p.mismatchStatus,
              'IDEMPOTENCY_KEY_REUSED',
              'This idempotency key was used with another request',
              'mismatch',
            );
          }
          return send(found.status, found.body, 'replayed', {
            ...found.headers,
            ...p.replayHeaders,
          });
        }
        break;
      }
      entry = {
        fingerprint: fp,
        state: 'in_flight',
        status: 0,
        headers: {},
        body: '',
        createdAt: this.now(),
        waiters: [],
      };
      this.keys.set(rec.key, entry);
    }

    // Stage 3: execution.
    const f = this.takeFault(route, rec, (x) => stageOf(x) === 'execution');
    const gate = f?.kind === 'hold' ? this.gates.get(f) : undefined;
    if (f) this.notify(); // a waitForRequest on `fault` sees it now
    if (gate && !gate.released) await new Promise<void>((r) => gate.waiters.push(r));
    const effect = this.effectOf(rec);
    let answer: RouteResponse;
    /** What a repeat of the key gets; undefined: nothing stored, a repeat runs again. */
    let stored: RouteResponse | undefined;
    let outcome: RequestOutcome = 'executed';
    if (f?.kind === 'status') {
      // A committed fault: the effect happened, and the answer is an error anyway.
      this.commit(effect);
      answer = {
        status: f.status,
        ...(f.headers ? { headers: f.headers } : {}),
        body: f.body ?? errorBody(p, f.status, `HTTP ${f.status}`, 'injected fault'),
      };
      // An API that does not store errors answers a repeat with what was done (PayPal: "the
      // latest status of the previous request"): the route's own answer.
      stored = p.storesErrors ? answer : this.respond(rec, effect);
      outcome = 'fault';
    } else {
      answer = this.respond(rec, effect);
      if (answer.status < 400) this.commit(effect);
      stored = answer.status < 400 || p.storesErrors ? answer : undefined;
    }
    if (entry && rec.key !== undefined) {
      const release = entry.waiters.splice(0);
      if (stored) {
        Object.assign(entry, {
          state: 'done',
          status: stored.status,
          headers: stored.headers ?? {},
          body: bodyText(stored),
        });
      } else {
        this.keys.delete(rec.key);
      }
      for (const w of release) w();
    }
    const body = bodyText(answer);
    return send(answer.status, body === '' ? undefined : body, outcome, answer.headers ?? {});
  }

  /** The effect a request would have: an object under a new id (see `commit`). */
  private effectOf(rec: RecordedRequest): Effect {
    const segment = rec.path.split('/').filter(Boolean).at(-1) ?? 'object';
    const id = `${
      segment
        .replace(/s$/, '')
        .replace(/[^a-z0-9]/gi, '')
        .slice(0, 12) || 'obj'
    }_${++this.nextId}`;
    let body: unknown = rec.rawBody;
    if (rec.json !== undefined) {
      body =
        this.profile.keyField !== undefined && rec.json && typeof rec.json === 'object'
          ? Object.fromEntries(
              Object.entries(rec.json as Record<string, unknown>).filter(
                ([k]) => k !== this.profile.keyField,
              ),
            )
          : rec.json;
    }
    const effect: Effect = {
      id,
      method: rec.method,
      path: rec.path,
      key: rec.key,
      body,
      requestSeq: rec.seq,
      at: new Date(this.now()),
    };
    return effect;
  }

  /** Performs an effect: counted, and its object readable with GET. */
  private commit(effect: Effect): void {
    this.effects.push(effect);
    const segment = effect.path.split('/').filter(Boolean).at(-1) ?? 'object';
    this.objects.set(effect.id, {
      id: effect.id,
      object: segment,
      ...(isRecord(effect.body) ? effect.body : {}),
    });
  }

  private read(
    rec: RecordedRequest,
    send: (status: number, body: unknown, outcome: RequestOutcome) => Promise<void>,
    error: (
      status: number,
      title: string,
      detail: string,
      outcome: RequestOutcome,
    ) => Promise<void>,
  ): Promise<void> {
    const id = rec.path.split('/').filter(Boolean).at(-1) ?? '';
    const obj = this.objects.get(id);
    return obj === undefined
      ? error(404, 'NOT_FOUND', `no object ${id}`, 'read')
      : send(200, obj, 'read');
  }
}

function bodyText(r: RouteResponse): string {
  return r.body === undefined ? '' : typeof r.body === 'string' ? r.body : JSON.stringify(r.body);
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

/** The default answer: `201` with the object created (`id`, `object`, and the body's fields). */
function defaultRespond(request: RecordedRequest, effect: Effect): RouteResponse {
  const segment = request.path.split('/').filter(Boolean).at(-1) ?? 'object';
  return {
    status: 201,
    headers: { location: `${request.path.replace(/\/$/, '')}/${effect.id}` },
    body: { id: effect.id, object: segment, ...(isRecord(effect.body) ? effect.body : {}) },
  };
}
