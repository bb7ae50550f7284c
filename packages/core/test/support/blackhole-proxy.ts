/**
 * A TCP proxy in front of PostgreSQL that can black-hole its connections: from the moment it is
 * cut, nothing is forwarded in either direction and no socket is closed, so each side sees a
 * peer that is alive but silent — what a network partition, or a proxy whose far side is gone,
 * looks like to a client. Loopback only.
 */
import { connect, createServer, type Server, type Socket } from 'node:net';

/** A running proxy; see the module comment. */
export class BlackholeProxy {
  private readonly server: Server;
  private readonly sockets = new Set<Socket>();
  private cut = false;
  private cutOnCommit = false;
  /** Resolves when the proxy was cut (by `blackhole()` or by the armed COMMIT). */
  readonly wasCut: Promise<void>;
  private markCut!: () => void;

  private constructor(
    private readonly target: { host: string; port: number },
    readonly port: number,
    server: Server,
  ) {
    this.server = server;
    this.wasCut = new Promise((resolve) => {
      this.markCut = resolve;
    });
  }

  /** Starts a proxy on 127.0.0.1 (a free port) to `target`. */
  static async start(target: { host: string; port: number }): Promise<BlackholeProxy> {
    let proxy: BlackholeProxy | undefined;
    const server = createServer((client) => proxy?.accept(client));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const address = server.address();
    if (!address || typeof address === 'string') throw new Error('proxy has no port');
    proxy = new BlackholeProxy(target, address.port, server);
    return proxy;
  }

  /** `url` with its host and port replaced by the proxy's. */
  urlThrough(url: string): string {
    const u = new URL(url);
    u.hostname = '127.0.0.1';
    u.port = String(this.port);
    return u.toString();
  }

  /** Cuts every connection now (see the module comment). */
  blackhole(): void {
    this.cut = true;
    this.markCut();
  }

  /**
   * Cuts every connection at the next COMMIT a client sends (a simple-query `COMMIT`), before
   * forwarding it (what precedes it in the same write is forwarded): the transaction has run its
   * last statement and waits, idle, for a COMMIT that never arrives.
   */
  cutAtNextCommit(): void {
    this.cutOnCommit = true;
  }

  /** Closes the proxy and every socket it holds. */
  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private accept(client: Socket): void {
    const upstream = connect(this.target.port, this.target.host);
    for (const s of [client, upstream]) {
      this.sockets.add(s);
      s.on('error', () => {});
      s.on('close', () => this.sockets.delete(s));
    }
    client.on('data', (chunk) => {
      if (this.cut) return;
      const commit = this.cutOnCommit ? commitAt(chunk) : -1;
      if (commit >= 0) {
        // What came before the COMMIT in the same write (a completion sent with it) goes through.
        if (commit > 0) upstream.write(chunk.subarray(0, commit));
        this.blackhole();
        return;
      }
      upstream.write(chunk);
    });
    upstream.on('data', (chunk) => {
      if (!this.cut) client.write(chunk);
    });
    // While cut, a side that closes is not told to the other: the silence must go on.
    client.on('close', () => {
      if (!this.cut) upstream.destroy();
    });
    upstream.on('close', () => {
      if (!this.cut) client.destroy();
    });
  }
}

/** Where a simple-query message ('Q') whose text is COMMIT starts in `chunk`, or -1. */
function commitAt(chunk: Buffer): number {
  const i = chunk.indexOf('COMMIT\u0000');
  return i >= 5 && chunk[i - 5] === 0x51 ? i - 5 : -1;
}
