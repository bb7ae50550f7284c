/**
 * The base of a local fake provider for testing idempotent calls: a `LoopbackHttpServer` that
 * records every request and applies programmable faults (an error status, a reset connection, a
 * delayed answer; each with or without the effect), so a test can count the provider's real
 * effects. A fake names its routes and answers them (`routeOf`, `handle`); `runWithFault` gives a
 * route the standard fault semantics.
 */
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http';
import { LoopbackHttpServer, type LoopbackHttpServerOptions } from './loopback-http-server.js';

/**
 * One request as the fake received it. `K` is the fake's fault kinds (a fake whose faults
 * extend `Fault` records its own).
 */
export interface RecordedRequest<K extends string = Fault['kind']> {
  /** Sequence number, from 1, in arrival order. */
  seq: number;
  /** HTTP method, upper-case. */
  method: string;
  /** The path without the query string, e.g. `/v3/mail/send`. */
  path: string;
  /** The query string's parameters (repeated names keep every value, in order). */
  query: URLSearchParams;
  /** Request headers, names lower-cased (Node's `IncomingHttpHeaders`). */
  headers: IncomingHttpHeaders;
  /** The raw body as received (UTF-8). */
  rawBody: string;
  /** The body parsed as JSON, when it is JSON; otherwise `undefined`. */
  json: unknown;
  /** The body parsed as a form, when it is `application/x-www-form-urlencoded`; else empty. */
  form: URLSearchParams;
  /** When the request's body was fully received (on the fake's clock). */
  at: Date;
  /** The route the fake matched (e.g. `send`, `create`), or `unknown`. */
  route: string;
  /** The fault applied to this request, if one was (the last one, when a fake applies several). */
  fault?: K;
}

/**
 * A programmable fault: the provider failures that decide whether a call may be repeated.
 * - `status`: answer `status` with the provider's error body. `commit: true` performs the effect
 *   first (a provider that accepted the request and still answered 5xx); default false.
 * - `reset`: destroy the socket without answering (the client sees `ECONNRESET` / "socket hang
 *   up"). `commit: true` performs the effect first: **the lost response**. `commit: false`
 *   refuses before any effect.
 * - `delay`: wait `ms` before answering. `commit` (default true) performs the effect before the
 *   wait, so a client timeout shorter than `ms` loses a response whose effect happened.
 */
export type Fault =
  | {
      kind: 'status';
      status: number;
      /** Error body override (JSON-serialised); default: the provider's shape for `status`. */
      body?: unknown;
      /** Extra response headers. */
      headers?: Record<string, string>;
      commit?: boolean;
    }
  | { kind: 'reset'; commit: boolean }
  | { kind: 'delay'; ms: number; commit?: boolean };

/**
 * Which requests a fault applies to (every given condition must hold), and how many: `times`
 * (default 1; `Infinity` for every one).
 */
export interface FaultOptions<
  R extends string,
  Q extends RecordedRequest<string> = RecordedRequest,
> {
  /** A route name of the fake, or `any`. Default: the fake's main route. */
  route?: R | 'any';
  /** Only requests with this method (`GET`, `POST`…). */
  method?: string;
  /** Only requests to this path (without the query), exact or a RegExp. */
  path?: string | RegExp;
  times?: number;
  /** Only requests for which this returns true (e.g. one recipient of parallel sends). */
  match?: (request: Q) => boolean;
}

/** Control of one injected fault. */
export interface FaultHandle {
  /** Requests the fault has been applied to so far. */
  readonly hits: number;
  /**
   * Resolves once the fault has been applied to `n` requests (default 1).
   * @throws after `timeoutMs` (default 10 s).
   */
  waitForHit(n?: number, timeoutMs?: number): Promise<void>;
  /** Withdraws the fault if it is not spent yet. */
  remove(): void;
}

interface QueuedFault<F, Q> {
  fault: F;
  route: string;
  method: string | undefined;
  path: string | RegExp | undefined;
  left: number;
  match: ((request: Q) => boolean) | undefined;
  hits: number;
  hitWaiters: { n: number; resolve: () => void }[];
}

/** What a route handler returns: the response to write. */
export interface RouteResponse {
  status: number;
  headers?: Record<string, string>;
  /** A string is written as is; anything else is JSON-serialised. `undefined`: empty body. */
  body?: unknown;
}

/** Context given to the provider layer for one request. */
export interface Exchange<F = Fault, Q = RecordedRequest> {
  request: Q;
  /** The fault to apply on arrival, already taken off the queue (undefined: respond normally). */
  fault: F | undefined;
  /**
   * Ends the exchange with a response.
   * @returns false when it was skipped: the socket is gone or the response already sent.
   */
  respond(r: RouteResponse): boolean;
  /** Destroys the socket without a response. */
  destroy(): void;
  /** Waits `ms`, unless the fake closes first. */
  sleep(ms: number): Promise<void>;
}

/**
 * A recording, fault-injecting loopback fake of a provider whose routes are `R`. A subclass
 * decides the route of a request (`routeOf`), performs its effects and answers through the
 * `Exchange` (`handle`, usually with `runWithFault`), and starts with `this.server.listen()`.
 *
 * A fake with faults of its own passes their union as `F` (the standard `Fault` kinds plus its
 * own, e.g. Stripe's `hold`) and a record with its own fields as `Q` (built by `recordOf`), and
 * may take faults at more than one stage of a request (`faultOnArrival`, `takeFault`).
 */
export abstract class LoopbackFake<
  R extends string,
  F extends { kind: string } = Fault,
  Q extends RecordedRequest<F['kind']> = RecordedRequest<F['kind']>,
> {
  /** Every request received, in order. */
  readonly requests: Q[] = [];
  /** The server; `listen()` it to start. */
  protected readonly server: LoopbackHttpServer;
  private readonly faults: QueuedFault<F, Q>[] = [];
  private seq = 0;
  private refusing = false;

  /**
   * @param mainRoute the route `inject` targets by default: the provider's main mutating call,
   *   or `any`.
   * @param serverOptions options of the `LoopbackHttpServer` (how a bug in the fake is answered).
   */
  protected constructor(
    private readonly mainRoute: R | 'any',
    serverOptions: LoopbackHttpServerOptions = {},
  ) {
    this.server = new LoopbackHttpServer((req, res) => this.onRequest(req, res), serverOptions);
  }

  /** The route of a request, or `unknown` (not recorded against a route, never faulted). */
  protected abstract routeOf(method: string, path: string): R | 'unknown';

  /** Answers one request (with `runWithFault` for the standard fault semantics). */
  protected abstract handle(route: R | 'unknown', ex: Exchange<F, Q>): Promise<void>;

  /** A fake's record of a request: the common fields plus its own (default: the common ones). */
  protected recordOf(base: RecordedRequest<F['kind']>): Q {
    return base as Q;
  }

  /**
   * The fault a request gets on arrival (`Exchange.fault`). Default: the first queued fault that
   * applies, none for an `unknown` route. A fake that applies faults at later stages of a
   * request too takes only its arrival faults here, and the others with `takeFault`.
   */
  protected faultOnArrival(route: R | 'unknown', request: Q): F | undefined {
    return route === 'unknown' ? undefined : this.takeFault(route, request);
  }

  /** The time a request is recorded at (`RecordedRequest.at`). Default: now. */
  protected clock(): Date {
    return new Date();
  }

  /** `http://127.0.0.1:PORT` (no trailing slash). */
  get origin(): string {
    return this.server.origin;
  }

  /** The port listened on. */
  get port(): number {
    return this.server.port;
  }

  /**
   * Queues a fault for the next `times` (default 1) requests of `route` (default: the main
   * route) that meet the other conditions of `options`. Faults apply in the order queued.
   * @returns the fault's handle: how often it applied, a wait for that, its withdrawal.
   * @throws RangeError when `times` is neither an integer ≥ 1 nor `Infinity`.
   */
  inject(fault: F, options: FaultOptions<R, Q> = {}): FaultHandle {
    const times = options.times ?? 1;
    if (times !== Number.POSITIVE_INFINITY && (!Number.isInteger(times) || times < 1))
      throw new RangeError(`times must be an integer ≥ 1 or Infinity, got ${times}`);
    const q: QueuedFault<F, Q> = {
      fault,
      route: options.route ?? this.mainRoute,
      method: options.method?.toUpperCase(),
      path: options.path,
      left: times,
      match: options.match,
      hits: 0,
      hitWaiters: [],
    };
    this.faults.push(q);
    return {
      get hits() {
        return q.hits;
      },
      waitForHit: (n = 1, timeoutMs = 10_000) =>
        q.hits >= n
          ? Promise.resolve()
          : new Promise<void>((resolve, reject) => {
              const t = setTimeout(
                () =>
                  reject(
                    new Error(
                      `fault ${fault.kind} hit ${q.hits}/${n} times within ${timeoutMs} ms`,
                    ),
                  ),
                timeoutMs,
              );
              q.hitWaiters.push({
                n,
                resolve: () => {
                  clearTimeout(t);
                  resolve();
                },
              });
            }),
      remove: () => {
        const i = this.faults.indexOf(q);
        if (i >= 0) this.faults.splice(i, 1);
      },
    };
  }

  /** Faults queued and not yet used. */
  get pendingFaults(): number {
    return this.faults.reduce((n, f) => n + f.left, 0);
  }

  /** Drops the queued faults. */
  clearFaults(): void {
    this.faults.length = 0;
  }

  /**
   * Closes the listener (same port kept): clients get `ECONNREFUSED` until `resume()`. A no-op
   * while connections are refused already.
   */
  async refuseConnections(): Promise<void> {
    if (this.refusing) return;
    this.refusing = true;
    await this.server.stopListening();
  }

  /** Listens again on the same port after `refuseConnections()` (a no-op otherwise). */
  async resume(): Promise<void> {
    if (!this.refusing) return;
    this.refusing = false;
    await this.server.listen(this.server.port);
  }

  /** Resolves once no request is being handled (delayed answers included). */
  idle(): Promise<void> {
    return this.server.idle();
  }

  /** Stops the fake: delayed answers are cut short, open sockets destroyed. Idempotent. */
  close(): Promise<void> {
    return this.server.close();
  }

  /**
   * Takes the first queued fault that applies to `request` (and that `accept` accepts, when
   * given) off the queue, counts the hit and notes its kind on the request.
   */
  protected takeFault(
    route: R | 'unknown',
    request: Q,
    accept?: (fault: F) => boolean,
  ): F | undefined {
    const i = this.faults.findIndex(
      (f) =>
        (f.route === 'any' || f.route === route) &&
        (f.method === undefined || f.method === request.method) &&
        (f.path === undefined ||
          (typeof f.path === 'string' ? f.path === request.path : f.path.test(request.path))) &&
        (!accept || accept(f.fault)) &&
        (!f.match || f.match(request)),
    );
    if (i < 0) return undefined;
    const f = this.faults[i] as QueuedFault<F, Q>;
    f.left--;
    if (f.left === 0) this.faults.splice(i, 1);
    f.hits++;
    for (const w of [...f.hitWaiters]) {
      if (f.hits >= w.n) {
        f.hitWaiters.splice(f.hitWaiters.indexOf(w), 1);
        w.resolve();
      }
    }
    request.fault = f.fault.kind;
    return f.fault;
  }

  private async onRequest(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const rawBody = Buffer.concat(chunks).toString('utf8');
    const url = new URL(req.url ?? '/', 'http://127.0.0.1');
    const method = (req.method ?? 'GET').toUpperCase();
    const route = this.routeOf(method, url.pathname);
    let json: unknown;
    if (rawBody.length > 0) {
      try {
        json = JSON.parse(rawBody);
      } catch {
        json = undefined;
      }
    }
    const request = this.recordOf({
      seq: ++this.seq,
      method,
      path: url.pathname,
      query: url.searchParams,
      headers: req.headers,
      rawBody,
      json,
      form: /application\/x-www-form-urlencoded/i.test(req.headers['content-type'] ?? '')
        ? new URLSearchParams(rawBody)
        : new URLSearchParams(),
      at: this.clock(),
      route,
    });
    const fault = this.faultOnArrival(route, request);
    this.requests.push(request);
    const ex: Exchange<F, Q> = {
      request,
      fault,
      respond: (r) => {
        if (res.destroyed || res.writableEnded || req.socket.destroyed) return false;
        const body =
          r.body === undefined ? '' : typeof r.body === 'string' ? r.body : JSON.stringify(r.body);
        const headers: Record<string, string> = { ...(r.headers ?? {}) };
        if (
          body.length > 0 &&
          !Object.keys(headers).some((h) => h.toLowerCase() === 'content-type')
        )
          headers['content-type'] = 'application/json';
        res.writeHead(r.status, headers);
        res.end(body);
        return true;
      },
      destroy: () => {
        req.socket.destroy();
      },
      sleep: (ms) => this.server.sleep(ms),
    };
    await this.handle(route, ex);
  }
}

/**
 * Runs one exchange of a route with the standard fault semantics (see `Fault`): `perform` does
 * the provider's work (validation, then the effect) and returns the normal response;
 * `errorBody(status)` is the provider-shaped error body of a `status` fault.
 */
export async function runWithFault(
  ex: Exchange,
  perform: () => RouteResponse,
  errorBody: (status: number) => unknown,
): Promise<void> {
  const f = ex.fault;
  if (!f) {
    ex.respond(perform());
    return;
  }
  switch (f.kind) {
    case 'status': {
      if (f.commit) perform();
      ex.respond({
        status: f.status,
        ...(f.headers ? { headers: f.headers } : {}),
        body: f.body ?? errorBody(f.status),
      });
      return;
    }
    case 'reset': {
      if (f.commit) perform();
      ex.destroy();
      return;
    }
    case 'delay': {
      if (f.commit === false) {
        await ex.sleep(f.ms);
        ex.respond(perform());
        return;
      }
      const r = perform();
      await ex.sleep(f.ms);
      ex.respond(r);
      return;
    }
  }
}
