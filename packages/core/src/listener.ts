/**
 * The worker's LISTEN connection: a NOTIFY naming one of its workflows wakes the claim loop at
 * once. A lost connection is opened again after a second; polling covers the gap. The connection
 * is idle while it listens, so a silent peer is found by TCP keepalive, on both ends.
 */
import pg from 'pg';
import { CONNECT_TIMEOUT_MS } from './db.js';
import type { Logger } from './logger.js';

/** What the listener needs of its worker. */
export interface ListenerParts {
  /** How to connect (the client's connection string, or the settings of a caller-given pool). */
  connection: pg.ClientConfig;
  /** The NOTIFY channel. */
  channel: string;
  /** Idle time before the client's keepalive probes (ms): `DeadConnectionSettings`. */
  keepAliveIdleMs: number;
  /** The server's keepalive settings for the session, run before LISTEN; none behind a pooler. */
  serverSql?: { text: string; values: string[] };
  log: Logger;
  /** False once the worker stops: no new connection is opened then. */
  isRunning(): boolean;
  /** True for a NOTIFY payload (a workflow name) this worker runs. */
  wants(workflow: string): boolean;
  /** Wakes the claim loop (or, for a schedule's payload, the scheduler). */
  wake(payload?: string): void;
}

/** The LISTEN connection with its reconnect. */
export class Listener {
  private conn: pg.Client | undefined;

  constructor(private readonly parts: ListenerParts) {}

  /**
   * Connects and LISTENs. Resolves once listening, or once the attempt failed (logged; another
   * follows a second later while the worker runs).
   */
  async start(): Promise<void> {
    const { parts } = this;
    if (!parts.isRunning()) return;
    // A dedicated connection: LISTEN needs one.
    const c = new pg.Client({
      ...parts.connection,
      connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
      keepAlive: true,
      keepAliveInitialDelayMillis: parts.keepAliveIdleMs,
    });
    c.on('notification', (msg) => {
      if (!msg.payload || parts.wants(msg.payload)) parts.wake(msg.payload || undefined);
    });
    const reconnect = () => {
      if (this.conn !== c) return;
      this.conn = undefined;
      c.end().catch(() => {});
      if (parts.isRunning()) {
        parts.log.warn({}, 'LISTEN connection lost; polling until it is back');
        setTimeout(() => void this.start(), 1_000).unref();
      }
    };
    c.on('error', reconnect);
    c.on('end', reconnect);
    try {
      await c.connect();
      if (parts.serverSql) await c.query(parts.serverSql.text, parts.serverSql.values);
      await c.query(`LISTEN "${parts.channel}"`);
      if (!parts.isRunning()) {
        // The worker stopped while this connection was being opened.
        c.removeAllListeners('end');
        await c.end().catch(() => {});
        return;
      }
      this.conn = c;
      // Work may have arrived while we were not listening.
      parts.wake();
    } catch (err) {
      c.end().catch(() => {});
      parts.log.warn({ err: String(err) }, 'LISTEN failed; polling until it works');
      if (parts.isRunning()) setTimeout(() => void this.start(), 1_000).unref();
    }
  }

  /** Closes the connection; no reconnect follows (the worker no longer runs). */
  async stop(): Promise<void> {
    const c = this.conn;
    this.conn = undefined;
    await c?.end().catch(() => {});
  }
}
