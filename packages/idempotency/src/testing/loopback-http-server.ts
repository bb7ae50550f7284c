/**
 * The server part of a local fake provider: a `node:http` server on 127.0.0.1 (port 0 unless given)
 * that can stop listening and listen again on the same port (clients then get `ECONNREFUSED`), cuts
 * its delayed answers short and destroys every open socket on `close()`, and knows when no request
 * is being handled. What a request does is the fake's `handler`.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';

/** Handles one request: reads it, and answers or destroys the socket. */
export type RequestHandler = (req: IncomingMessage, res: ServerResponse) => Promise<void>;

/** Options of `LoopbackHttpServer`. */
export interface LoopbackHttpServerOptions {
  /**
   * Answers a request whose handler threw (a bug in the fake), when the answer has not begun and
   * the socket is still there. Default: `500`, `text/plain`, `fake server error: <message>`.
   */
  onError?: (err: unknown, res: ServerResponse) => void;
}

function answerError(err: unknown, res: ServerResponse): void {
  res.writeHead(500, { 'content-type': 'text/plain' });
  res.end(`fake server error: ${(err as Error).message}`);
}

/** A loopback `node:http` server for a fake provider; see the module comment. */
export class LoopbackHttpServer {
  /** Always `127.0.0.1`. */
  readonly host = '127.0.0.1';
  private readonly server: Server;
  private readonly sockets = new Set<Socket>();
  private readonly timers = new Map<NodeJS.Timeout, () => void>();
  private readonly inflight = new Set<Promise<void>>();
  private portValue = 0;
  private closed = false;

  constructor(handler: RequestHandler, options: LoopbackHttpServerOptions = {}) {
    const onError = options.onError ?? answerError;
    this.server = createServer((req, res) => {
      const p = handler(req, res).catch((err: unknown) => {
        if (!res.headersSent && !res.destroyed) onError(err, res);
      });
      this.inflight.add(p);
      p.finally(() => this.inflight.delete(p));
    });
    this.server.on('connection', (s) => {
      this.sockets.add(s);
      s.on('close', () => this.sockets.delete(s));
    });
  }

  /**
   * Starts listening on 127.0.0.1 (`port` 0: a free port chosen by the OS).
   * @throws the listen error (e.g. `EADDRINUSE` for a fixed port).
   */
  async listen(port = 0): Promise<void> {
    await new Promise<void>((resolve, reject) => {
      const onError = (err: Error) => reject(err);
      this.server.once('error', onError);
      this.server.listen(port, this.host, () => {
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
    return `http://${this.host}:${this.portValue}`;
  }

  /**
   * Stops accepting connections and closes the open ones, keeping the port number: clients then
   * get `ECONNREFUSED` (nothing was sent: the "not sent" outcome), until
   * `listen(this.port)`.
   * @param settleMs then waits this long (default 20 ms), so that clients in this process see
   *   their keep-alive sockets close (the FIN arrives on the next poll phases) and open a new,
   *   refused, connection for their next request.
   */
  async stopListening(settleMs = 20): Promise<void> {
    const closed = new Promise<void>((resolve) => this.server.close(() => resolve()));
    for (const s of this.sockets) s.destroy();
    await closed;
    if (settleMs > 0) await new Promise((r) => setTimeout(r, settleMs));
  }

  /** Waits `ms`, or less when the server closes first (at once when it is closed). */
  sleep(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      if (this.closed) return resolve();
      const t = setTimeout(() => {
        this.timers.delete(t);
        resolve();
      }, ms);
      this.timers.set(t, resolve);
    });
  }

  /** Resolves when no request is being handled (delayed answers included). */
  async idle(): Promise<void> {
    while (this.inflight.size > 0) await Promise.allSettled([...this.inflight]);
  }

  /** Stops the server: pending `sleep`s are cut short, open sockets destroyed. Idempotent. */
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
}
