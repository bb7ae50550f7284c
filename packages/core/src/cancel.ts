/**
 * Cancelling the statement running on one of the engine's connections, from outside it: the
 * protocol's CancelRequest, sent on a new connection to the same host and port with the process
 * id and secret key the server gave the connection at startup (PostgreSQL documentation,
 * "Frontend/Backend Protocol", Canceling Requests in Progress; the message is CancelRequest:
 * Int32 16, Int32 80877102, Int32 process id, Int32 secret key).
 *
 * Not `pg_cancel_backend(processID)`: behind PgBouncer the process id a client sees is
 * PgBouncer's own, no server backend's, so that call cancels nothing; PgBouncer forwards a
 * CancelRequest to the server connection its client is linked to.
 */
import { connect } from 'node:net';
import type pg from 'pg';

/** CancelRequest's request code (1234 << 16 | 5678). */
const CANCEL_REQUEST_CODE = 80877102;

/** What pg keeps of a connection that a CancelRequest needs (not in pg's type declarations). */
interface CancelKey {
  host?: string;
  port?: number;
  processID?: number | null;
  secretKey?: number | null;
}

/**
 * Asks the server (or the pooler) that `c` is connected to to cancel the statement `c` is
 * running, and waits until the request was taken: the peer closes the request's connection
 * once it has acted on it (PgBouncer after forwarding it), or `timeoutMs` ran out. A cancel
 * that arrives after the statement ended does nothing.
 * @returns false when it could not be sent: `c` has no key (never connected) or no host and
 *   port (a custom stream), or the request's connection failed. Never throws.
 */
export function cancelStatement(c: pg.ClientBase, timeoutMs = 5_000): Promise<boolean> {
  const { host, port, processID, secretKey } = c as unknown as CancelKey;
  if (typeof processID !== 'number' || typeof secretKey !== 'number' || !port) {
    return Promise.resolve(false);
  }
  const packet = Buffer.alloc(16);
  packet.writeInt32BE(16, 0);
  packet.writeInt32BE(CANCEL_REQUEST_CODE, 4);
  packet.writeInt32BE(processID, 8);
  packet.writeInt32BE(secretKey, 12);
  return new Promise((resolve) => {
    // A host starting with '/' is a unix socket directory, as pg reads it.
    const socket = host?.startsWith('/')
      ? connect(`${host}/.s.PGSQL.${port}`)
      : connect(port, host ?? 'localhost');
    let sent = false;
    const done = (ok: boolean) => {
      clearTimeout(timer);
      socket.destroy();
      resolve(ok);
    };
    const timer = setTimeout(() => done(sent), timeoutMs);
    socket.once('connect', () => {
      socket.write(packet, () => {
        sent = true;
      });
    });
    // The peer answers nothing; it closes the connection once it has read the request.
    socket.on('data', () => {});
    socket.once('close', () => done(sent));
    socket.once('error', () => done(false));
  });
}
