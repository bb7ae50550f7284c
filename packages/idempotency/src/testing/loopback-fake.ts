/**
 * The base of a local fake provider for testing idempotent calls (PROVIDERS.md § 5, general
 * rules): a `LoopbackHttpServer` that records every request and applies programmable faults (an
 * error status, a reset connection, a delayed answer; each with or without the effect), so a
 * test can count the provider's real effects. A fake names its routes and answers them
 * (`routeOf`, `handle`); `runWithFault` gives a route the standard fault semantics.
 */
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http';
import { LoopbackHttpServer } from './loopback-http-server.js';

/** One request as the fake received it. */
export interface RecordedRequest {
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
  /** When the request's body was fully received. */
  at: Date;
  /** The route the fake matched (e.g. `send`, `create`), or `unknown`. */
  route: string;
  /** The fault applied to this request, if one was. */
  fault?: Fault['kind'];
}

/**
 * A programmable fault (PROVIDERS.md § 5: the faults that matter).
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

/** Where a fault applies: a route name of the fake, or `any`; `times` requests (default 1). */
export interface FaultOptions<R extends string> {
  route?: R | 'any';
  times?: number;
  /** Only requests for which this returns true (e.g. one recipient of parallel sends). */
  match?: (request: RecordedRequest) => boolean;
}

interface QueuedFault {
  fault: Fault;
  route: string;
  left: number;
  match: ((request: RecordedRequest) => boolean) | undefined;
}

/** What a route handler returns: the response to write. */
export interface RouteResponse {
  status: number;
  headers?: Record<string, string>;
  /** A string is written as is; anything else is JSON-serialised. `undefined`: empty body. */
  body?: unknown;
}

/** Context given to the provider layer for one request. */
export interface Exchange {
  request: RecordedRequest;
  /** The fault to apply, already taken off the queue (undefined: respond normally). */
  fault: Fault | undefined;
  /** Ends the exchange with a response (skipped when the socket is gone). */
  respond(r: RouteResponse): void;
  /** Destroys the socket without a response. */
  destroy(): void;
  /** Waits `ms`, unless the fake closes first. */
  sleep(ms: number): Promise<void>;
}

/**
 * A recording, fault-injecting loopback fake of a provider whose routes are `R`. A subclass
 * decides the route of a request (`routeOf`), performs its effects and answers through the
 * `Exchange` (`handle`, usually with `runWithFault`), and starts with `this.server.listen()`.
 */
export abstract class LoopbackFake<R extends string> {
  /** Every request received, in order. */
  readonly requests: RecordedRequest[] = [];
  /** The server; `listen()` it to start. */
  protected readonly server: LoopbackHttpServer;
  private readonly faults: QueuedFault[] = [];
  private seq = 0;

  /** @param mainRoute the route `inject` targets by default: the provider's main mutating call. */
  protected constructor(private readonly mainRoute: R) {
    this.server = new LoopbackHttpServer((req, res) => this.onRequest(req, res));
  }

  /** The route of a request, or `unknown` (not recorded against a route, never faulted). */
  protected abstract routeOf(method: string, path: string): R | 'unknown';

  /** Answers one request (with `runWithFault` for the standard fault semantics). */
  protected abstract handle(route: R | 'unknown', ex: Exchange): Promise<void>;

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
   * route) for which `match` holds. Faults apply in the order queued.
   * @throws RangeError when `times` is not an integer ≥ 1.
   */
  inject(fault: Fault, options: FaultOptions<R> = {}): void {
    const times = options.times ?? 1;
    if (!Number.isInteger(times) || times < 1)
      throw new RangeError(`times must be an integer ≥ 1, got ${times}`);
    this.faults.push({
      fault,
      route: options.route ?? this.mainRoute,
      left: times,
      match: options.match,
    });
  }

  /** Faults queued and not yet used. */
  get pendingFaults(): number {
    return this.faults.reduce((n, f) => n + f.left, 0);
  }

  /** Drops the queued faults. */
  clearFaults(): void {
    this.faults.length = 0;
  }

  /** Closes the listener (same port kept): clients get `ECONNREFUSED` until `resume()`. */
  refuseConnections(): Promise<void> {
    return this.server.stopListening();
  }

  /** Listens again on the same port after `refuseConnections()`. */
  resume(): Promise<void> {
    return this.server.listen(this.server.port);
  }

  /** Resolves once no request is being handled (delayed answers included). */
  idle(): Promise<void> {
    return this.server.idle();
  }

  /** Stops the fake: delayed answers are cut short, open sockets destroyed. Idempotent. */
  close(): Promise<void> {
    return this.server.close();
  }

  private takeFault(route: string, request: RecordedRequest): Fault | undefined {
    const i = this.faults.findIndex(
      (f) => (f.route === 'any' || f.route === route) && (!f.match || f.match(request)),
    );
    if (i < 0) return undefined;
    const f = this.faults[i] as QueuedFault;
    f.left--;
    if (f.left === 0) this.faults.splice(i, 1);
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
    const request: RecordedRequest = {
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
      at: new Date(),
      route,
    };
    const fault = route === 'unknown' ? undefined : this.takeFault(route, request);
    if (fault) request.fault = fault.kind;
    this.requests.push(request);
    const ex: Exchange = {
      request,
      fault,
      respond: (r) => {
        if (res.destroyed || res.writableEnded) return;
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
  if (!f) return ex.respond(perform());
  switch (f.kind) {
    case 'status': {
      if (f.commit) perform();
      return ex.respond({
        status: f.status,
        ...(f.headers ? { headers: f.headers } : {}),
        body: f.body ?? errorBody(f.status),
      });
    }
    case 'reset': {
      if (f.commit) perform();
      return ex.destroy();
    }
    case 'delay': {
      if (f.commit === false) {
        await ex.sleep(f.ms);
        return ex.respond(perform());
      }
      const r = perform();
      await ex.sleep(f.ms);
      return ex.respond(r);
    }
  }
}
