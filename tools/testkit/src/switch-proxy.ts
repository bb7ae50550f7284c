/**
 * The address that moves on failover: a TCP forwarder on 127.0.0.1 that the test owns, in front
 * of whichever PostgreSQL server is the primary. It stands for what production puts there — a
 * proxy whose health check follows the primary (HAProxy on Patroni's REST API, a cloud
 * database's endpoint, PgBouncer re-pointed) or a DNS name switched to the new primary: clients
 * keep one address, and at a failover their open sessions end and new ones reach the new
 * primary.
 *
 * - `switchTo(target)`: new connections go to `target`; every open connection is reset (RST,
 *   as HAProxy's `on-marked-down shutdown-sessions` does), so no client keeps a session on the
 *   old server;
 * - `switchTo(undefined)`: no primary yet (between the old one's death and the promotion): a
 *   new connection is reset at once, as a proxy with no healthy backend does;
 * - an upstream that closes (a killed server) closes its client side, and the other way round.
 */
import { connect, createServer, type Server, type Socket } from 'node:net';

/** Where the proxy forwards to. */
export interface ProxyTarget {
  host: string;
  port: number;
}

/** A running forwarder; see the module comment. */
export class SwitchProxy {
  private target: ProxyTarget | undefined;
  private readonly pairs = new Set<[Socket, Socket]>();
  /** Connections accepted in all, and those reset because no target was set. */
  readonly counts = { accepted: 0, refused: 0, reset: 0 };

  private constructor(
    private readonly server: Server,
    /** The proxy's port on 127.0.0.1. */
    readonly port: number,
  ) {}

  /**
   * Starts a forwarder on 127.0.0.1 (`port`, default a free one) to `target`.
   * @throws when the port cannot be bound.
   */
  static async start(target: ProxyTarget | undefined, port = 0): Promise<SwitchProxy> {
    let proxy: SwitchProxy | undefined;
    const server = createServer((client) => proxy?.accept(client));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, '127.0.0.1', () => resolve());
    });
    const address = server.address();
    if (!address || typeof address === 'string') throw new Error('the proxy has no port');
    proxy = new SwitchProxy(server, address.port);
    proxy.target = target;
    return proxy;
  }

  /** The current target (undefined: none, connections are refused). */
  get current(): ProxyTarget | undefined {
    return this.target;
  }

  /** Connections open through the proxy now. */
  get open(): number {
    return this.pairs.size;
  }

  /** `url` (a postgres:// URL) with its host and port replaced by the proxy's. */
  urlThrough(url: string): string {
    const u = new URL(url);
    u.hostname = '127.0.0.1';
    u.port = String(this.port);
    return u.toString();
  }

  /**
   * Sends new connections to `target` (none: refused) and resets every open one.
   * @returns how many open connections were reset.
   */
  switchTo(target: ProxyTarget | undefined): number {
    this.target = target;
    return this.resetAll();
  }

  /** Resets every open connection (both sides), leaving the target as it is. */
  resetAll(): number {
    const n = this.pairs.size;
    for (const pair of [...this.pairs]) {
      this.pairs.delete(pair);
      reset(pair[0]);
      reset(pair[1]);
    }
    this.counts.reset += n;
    return n;
  }

  /** Stops listening and resets every open connection. */
  async close(): Promise<void> {
    this.target = undefined;
    this.resetAll();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private accept(client: Socket): void {
    client.on('error', () => {});
    const target = this.target;
    if (!target) {
      this.counts.refused++;
      reset(client);
      return;
    }
    this.counts.accepted++;
    const upstream = connect(target.port, target.host);
    upstream.on('error', () => {});
    upstream.setNoDelay(true);
    client.setNoDelay(true);
    const pair: [Socket, Socket] = [client, upstream];
    this.pairs.add(pair);
    const end = () => {
      if (!this.pairs.delete(pair)) return;
      // One side went away (a killed server, a client that quit): the other side goes too.
      client.destroy();
      upstream.destroy();
    };
    client.on('close', end);
    upstream.on('close', end);
    client.pipe(upstream);
    upstream.pipe(client);
  }
}

/** Closes `s` with a TCP RST where possible (the peer sees ECONNRESET, as from a dead proxy). */
function reset(s: Socket): void {
  try {
    if (!s.destroyed && typeof s.resetAndDestroy === 'function' && s.readyState !== 'opening') {
      s.resetAndDestroy();
    } else s.destroy();
  } catch {
    s.destroy();
  }
}
