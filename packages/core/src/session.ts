/**
 * Whether a connection is a session of the server's own or one handed out by a
 * transaction-pooling proxy (PgBouncer in transaction mode), where a session-level `SET` lands on
 * whichever server connection runs it, stays there for the next client of that connection, and is
 * gone from this one at its next transaction.
 */
import type pg from 'pg';

/**
 * True when `c` talks to a server backend of its own: the process id the server gave it at
 * startup (BackendKeyData) is the backend's `pg_backend_pid()`. Behind PgBouncer the id is one
 * PgBouncer made up (measured: 132246029 for backend 13129), so they differ; false too when pg
 * has no id for it or the query fails. One round trip.
 */
export async function isDirectSession(c: pg.ClientBase): Promise<boolean> {
  const processID = (c as unknown as { processID?: number | null }).processID;
  if (typeof processID !== 'number') return false;
  try {
    const { rows } = await c.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
    return rows[0]?.pid === processID;
  } catch {
    return false;
  }
}
