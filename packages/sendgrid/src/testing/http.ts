/**
 * The loopback HTTP plumbing of the fake (PROVIDERS.md § 5, general rules): a `node:http` server
 * on 127.0.0.1, port 0, that records every request and applies programmable faults. The
 * provider-specific routes live in fake-sendgrid.ts.
 */
import {
  createServer,
  type IncomingHttpHeaders,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from 'node:http';
import type { AddressInfo, Socket } from 'node:net';

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
  /** The route the fake matched (e.g. `send`), or `unknown`. */
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
 * A recording, fault-injecting loopback server. `handle` is the provider layer: it decides the
 * route, performs effects and answers through the `Exchange`.
 */
export class LoopbackServer<R extends string> {
  /** Every request received so far, in order. */
  readonly requests: RecordedRequest[] = [];
  private readonly server: Server;
  private readonly sockets = new Set<Socket>();
  private readonly timers = new Map<NodeJS.Timeout, () => void>();
  private readonly faults: QueuedFault[] = [];
  private readonly inflight = new Set<Promise<void>>();
  private seq = 0;
  private portValue = 0;
  private closed = false;

  constructor(
    private readonly routeOf: (method: string, path: string) => R | 'unknown',
    private readonly handle: (route: R | 'unknown', ex: Exchange) => Promise<void>,
  ) {
    this.server = createServer((req, res) => {
      const p = this.onRequest(req, res).catch((err) => {
        if (!res.headersSent && !res.destroyed) {
          res.writeHead(500, { 'content-type': 'text/plain' });
          res.end(`fake server error: ${(err as Error).message}`);
        }
      });
      this.inflight.add(p);
      p.finally(() => this.inflight.delete(p));
    });
    this.server.on('connection', (s) => {
      this.sockets.add(s);
      s.on('close', () => this.sockets.delete(s));
    });
  }

  /** Starts listening on 127.0.0.1 (`port` 0: a free port chosen by the OS). */
  async listen(port = 0): Promise<void> {
    await new Promise<void>((resolve, reject) => {
      const onError = (err: Error) => reject(err);
      this.server.once('error', onError);
      this.server.listen(port, '127.0.0.1', () => {
        this.server.off('error', onError);
        resolve();
      });
    });
    this.portValue = (this.server.address() as AddressInfo).port;
  }

  /** The port listened on (stays the same across `stopListening`/`listen(port)`). */
  get port(): number {
    return this.portValue;
  }

  /** `http://127.0.0.1:PORT` (no trailing slash). */
  get origin(): string {
    return `http://127.0.0.1:${this.portValue}`;
  }

  /**
   * Queues `fault` for the next `times` requests of `route` (default: the provider's main
   * mutating route, passed by the fake). Faults apply in the order queued.
   */
  inject(
    fault: Fault,
    route: string,
    times = 1,
    match?: (request: RecordedRequest) => boolean,
  ): void {
    if (!Number.isInteger(times) || times < 1)
      throw new RangeError(`times must be an integer ≥ 1, got ${times}`);
    this.faults.push({ fault, route, left: times, match });
  }

  /** Faults queued and not yet used. */
  get pendingFaults(): number {
    return this.faults.reduce((n, f) => n + f.left, 0);
  }

  /** Drops every queued fault. */
  clearFaults(): void {
    this.faults.length = 0;
  }

  /**
   * Stops accepting connections and closes the open ones, keeping the port number: clients then
   * get `ECONNREFUSED` (nothing was sent, PROVIDERS.md § 2.5 / § 3.5 "not sent"), until
   * `listen(this.port)`.
   */
  async stopListening(): Promise<void> {
    const closed = new Promise<void>((resolve) => this.server.close(() => resolve()));
    for (const s of this.sockets) s.destroy();
    await closed;
    // Let clients in this process see their keep-alive sockets close (the FIN arrives on the
    // next poll phases), so their next request opens a new connection and is refused.
    await new Promise((r) => setTimeout(r, 20));
  }

  /** Resolves when no request is being handled (delayed answers included). */
  async idle(): Promise<void> {
    while (this.inflight.size > 0) await Promise.allSettled([...this.inflight]);
  }

  /** Stops the server: pending delays are cut short, open sockets destroyed. Idempotent. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const [t, wake] of this.timers) {
      clearTimeout(t);
      wake();
    }
    this.timers.clear();
    const closed = new Promise<void>((resolve) => this.server.close(() => resolve()));
    for (const s of this.sockets) s.destroy();
    await closed;
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
      sleep: (ms) =>
        new Promise<void>((resolve) => {
          if (this.closed) return resolve();
          const t = setTimeout(() => {
            this.timers.delete(t);
            resolve();
          }, ms);
          this.timers.set(t, resolve);
        }),
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
