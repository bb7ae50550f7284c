/** Small helpers around pg connections, errors and waiting. */

/** How long opening a connection may take before it counts as failed (ms). */
export const CONNECT_TIMEOUT_MS = 10_000;

/** The longest delay Node's timers take (2³¹ − 1 ms, about 24.8 days); longer ones fire at once. */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/** Resolves after `ms` milliseconds. */
export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/**
 * True for errors that mean the connection (not the statement) failed, so the outcome of a
 * write may be unknown and a retry on a new connection is the right move: socket errors
 * (ECONNREFUSED, ECONNRESET, EPIPE, ETIMEDOUT), SQLSTATE class 08 (connection exception),
 * 57P01–57P03 (admin shutdown, crash shutdown, cannot connect now), and pg's
 * "Connection terminated" errors, which carry no code.
 */
export function isConnectionError(err: unknown): boolean {
  if (!err || typeof err !== 'object') return false;
  const code = (err as { code?: unknown }).code;
  if (typeof code === 'string') {
    return code.startsWith('08') || code.startsWith('57P') || /^E[A-Z]+$/.test(code);
  }
  const msg = String((err as { message?: unknown }).message ?? '');
  return /connection terminated|connection (is )?closed|not queryable|timeout exceeded when trying to connect/i.test(
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
