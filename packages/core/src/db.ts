/**
 * The database handle and the recipes every module shares: connections, transactions, the retry
 * of transient failures, and how long to wait.
 */
import type pg from 'pg';
import type { Logger } from './logger.js';
import type { SqlScope } from './sql/statement.js';

/**
 * The engine's handle on its database: the pool, the quoted schema, the NOTIFY channel and
 * whether statements are prepared (a `SqlScope` for the statements under `sql/`). The `Client`
 * owns one; a worker derives its own for its pools.
 */
export interface Db extends SqlScope {
  /** The pool statements run on. */
  readonly pool: pg.Pool;
  /** The schema name (unquoted, validated). */
  readonly schema: string;
}

/** How long opening a connection may take before it counts as failed (ms). */
export const CONNECT_TIMEOUT_MS = 10_000;

/**
 * The default bound (ms) on finding a connection dead once its peer went silent (a partition, a
 * host gone, a proxy whose far side is gone): see `deadConnectionSettings`.
 */
export const DEAD_CONNECTION_MS = 15_000;

/**
 * Node's keepalive probes after the idle time: 10 probes 1 s apart, which libuv sets with
 * TCP_KEEPINTVL and TCP_KEEPCNT and Node 20 does not let a caller change (measured here: a
 * blackholed idle socket with a 2 s idle time failed with ETIMEDOUT 12.3 s after its last packet).
 */
const KEEPALIVE_PROBES_MS = 10 * 1_000;

/** How an engine connection finds out that its peer went silent; see `deadConnectionSettings`. */
export interface DeadConnectionSettings {
  /** `keepAliveInitialDelayMillis` of pg's socket: idle time before the first probe (ms). */
  keepAliveIdleMs: number;
  /** pg's `query_timeout` for the engine's own statements (ms). */
  queryTimeoutMs: number;
  /**
   * The server's side, as one statement for a new session: its keepalive (idle time, 1 s probes,
   * 10 of them) and `tcp_user_timeout` (data it sent unacknowledged), so the server ends the
   * session of a client that vanished (an open transaction holding locks, a LISTEN) within the
   * same bound.
   */
  serverSql: { text: string; values: string[] };
}

/**
 * The settings that find a silent peer within `deadConnectionMs` (at least 11 s on the client's
 * keepalive, Node's probes taking 10 s): an idle connection, or one waiting for an answer whose
 * request was acknowledged, by TCP keepalive (probes after `deadConnectionMs − 10 s` of
 * silence); a request never acknowledged (TCP retransmits it for 15 minutes, and Node cannot set
 * TCP_USER_TIMEOUT) by the query timeout of the engine's own statements; the server's end by its
 * own keepalive and `tcp_user_timeout`. A handler's queries get the keepalive, not the timeout.
 */
export function deadConnectionSettings(deadConnectionMs: number): DeadConnectionSettings {
  const keepAliveIdleMs = Math.max(1_000, deadConnectionMs - KEEPALIVE_PROBES_MS);
  return {
    keepAliveIdleMs,
    queryTimeoutMs: deadConnectionMs,
    serverSql: {
      text: "SELECT set_config('tcp_keepalives_idle', $1, false), set_config('tcp_keepalives_interval', '1', false), set_config('tcp_keepalives_count', '10', false), set_config('tcp_user_timeout', $2, false)",
      values: [String(Math.ceil(keepAliveIdleMs / 1_000)), String(Math.ceil(deadConnectionMs))],
    },
  };
}

/** The longest delay Node's timers take (2³¹ − 1 ms, about 24.8 days); longer ones fire at once. */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/** Resolves after `ms` milliseconds. */
export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/**
 * Gives every connection of `pool` an 'error' listener for its whole life. pg-pool listens on a
 * connection only at some moments (while it is idle, and once per `pool.query`), and a
 * connection whose backend is terminated can emit "Connection terminated unexpectedly" when
 * nobody listens: unheard, that 'error' ends the process. The failures still reach the
 * statement that was running and the pool's own 'error' event.
 */
export function ignoreLateErrors(pool: pg.Pool): void {
  pool.on('connect', (c) => c.on('error', () => {}));
}

/**
 * True for errors that mean the connection (not the statement) failed, so the outcome of a
 * write may be unknown and a retry on a new connection is the right move: socket errors
 * (ECONNREFUSED, ECONNRESET, EPIPE, ETIMEDOUT), SQLSTATE class 08 (connection exception),
 * 57P01–57P03 (admin shutdown, crash shutdown, cannot connect now), and pg's
 * "Connection terminated" and "Query read timeout" errors, which carry no code.
 */
export function isConnectionError(err: unknown): boolean {
  if (!err || typeof err !== 'object') return false;
  const code = (err as { code?: unknown }).code;
  if (typeof code === 'string') {
    return code.startsWith('08') || code.startsWith('57P') || /^E[A-Z]+$/.test(code);
  }
  const msg = String((err as { message?: unknown }).message ?? '');
  // "Query read timeout": pg's query_timeout ran out, and the connection is counted dead.
  return /connection terminated|connection (is )?closed|not queryable|timeout exceeded when trying to connect|query read timeout/i.test(
    msg,
  );
}

/**
 * True for a deadlock (SQLSTATE 40P01) or a serialization failure (40001): PostgreSQL rolled the
 * statement's transaction back because of another transaction, so running it again is right.
 */
export function isTransactionConflict(err: unknown): boolean {
  const code = (err as { code?: unknown } | null | undefined)?.code;
  return code === '40P01' || code === '40001';
}

/** A statement that failed on one of PostgreSQL's size limits (SQLSTATE class 54). */
export function isLimitExceeded(err: unknown): boolean {
  const code = (err as { code?: unknown } | null | undefined)?.code;
  return typeof code === 'string' && code.startsWith('54');
}

/**
 * Runs `fn` with a connection checked out of `pool`. While checked out, the connection has an
 * 'error' listener of ours (pg emits 'error' on a checked-out client whose connection dies; with
 * no listener that crashes the process), and it is destroyed rather than reused when `fn` failed
 * on a connection error.
 */
export async function withConnection<T>(
  pool: import('pg').Pool,
  fn: (c: import('pg').PoolClient) => Promise<T>,
): Promise<T> {
  const c = await pool.connect();
  let lost: Error | undefined;
  const onError = (err: Error) => {
    lost = err;
  };
  c.on('error', onError);
  let failed: unknown;
  try {
    return await fn(c);
  } catch (err) {
    failed = err;
    throw err;
  } finally {
    c.removeListener('error', onError);
    c.release(lost ?? (isConnectionError(failed) ? (failed as Error) : undefined));
  }
}

/**
 * Waits for `p` for at most `ms` milliseconds; the timer is cleared as soon as `p` settles, so a
 * bounded wait never keeps the process alive.
 * @returns true when `p` settled (resolved or rejected) in time, false when the time ran out.
 */
export async function settlesWithin(p: Promise<unknown> | undefined, ms: number): Promise<boolean> {
  if (!p) return true;
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), Math.min(Math.max(0, ms), MAX_TIMER_MS));
  });
  try {
    return await Promise.race([
      p.then(
        () => true,
        () => true,
      ),
      timedOut,
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Runs `fn` in a transaction on a connection of `pool`: BEGIN, `fn`, COMMIT; ROLLBACK (and the
 * error rethrown) when `fn` or the COMMIT fails, except after a connection error. The connection is destroyed rather than reused
 * after a connection error (`withConnection`).
 */
export function withTransaction<T>(
  pool: pg.Pool,
  fn: (c: pg.PoolClient) => Promise<T>,
): Promise<T> {
  return withConnection(pool, async (c) => {
    await c.query('BEGIN');
    try {
      const out = await fn(c);
      await c.query('COMMIT');
      return out;
    } catch (err) {
      // After a connection error the connection is destroyed and the server rolls back; a
      // ROLLBACK would only queue behind a statement that gets no answer.
      if (!isConnectionError(err)) await c.query('ROLLBACK').catch(() => {});
      throw err;
    }
  });
}

/**
 * Runs `fn` (a whole transaction) in a transaction on a connection of `pool`, again when
 * PostgreSQL rolled it back for a deadlock or a serialization failure (`isTransactionConflict`),
 * at most `tries` times in all. Not after a connection error: the transaction may have committed.
 * @throws the last error, once it is not a conflict or the tries are used up.
 */
export async function withTransactionRetried<T>(
  pool: pg.Pool,
  fn: (c: pg.PoolClient) => Promise<T>,
  tries = 5,
): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await withTransaction(pool, fn);
    } catch (err) {
      if (!isTransactionConflict(err) || attempt >= tries) throw err;
    }
  }
}

/** How `retryTransient` retries. Durations in ms. */
export interface RetryPolicy {
  /** Retry until this much time has passed since the first try. */
  deadlineMs: number;
  /** Delay before retry `i` (0-based): `min(baseMs · 2^i, maxDelayMs)`. Default 50. */
  baseMs?: number;
  /** Default 2,000. */
  maxDelayMs?: number;
  /** Told of each transient failure before its retry. */
  log?: Logger;
}

/**
 * Runs `fn`, and again with exponential backoff while it fails transiently (a connection error,
 * a deadlock or a serialization failure: `isConnectionError`, `isTransactionConflict`) and the
 * deadline has not passed. Only for work that is safe to run twice, such as a fenced statement
 * or a whole transaction that rolled back.
 * @throws the last error, once it is not transient or the deadline has passed.
 */
export async function retryTransient<T>(fn: () => Promise<T>, policy: RetryPolicy): Promise<T> {
  const deadline = Date.now() + policy.deadlineMs;
  for (let i = 0; ; i++) {
    try {
      return await fn();
    } catch (err) {
      await sleep(
        transientRetryDelay(err, i, deadline, policy.log, policy.baseMs, policy.maxDelayMs),
      );
    }
  }
}

/**
 * `retryTransient`'s decision after failure `i` (0-based) of a try: the delay before the next
 * try, the failure logged to `log`; for a caller that runs the loop itself.
 * @throws `err` when it is not transient or `deadline` (ms, `Date.now()`'s clock) has passed.
 */
export function transientRetryDelay(
  err: unknown,
  i: number,
  deadline: number,
  log?: Logger,
  baseMs = 50,
  maxDelayMs = 2_000,
): number {
  const transient = isConnectionError(err) || isTransactionConflict(err);
  if (!transient || Date.now() >= deadline) throw err;
  log?.warn(
    { err: String(err) },
    isTransactionConflict(err)
      ? 'transaction conflict (deadlock or serialization failure); retrying'
      : 'database connection failed; retrying',
  );
  return Math.min(baseMs * 2 ** i, maxDelayMs);
}
