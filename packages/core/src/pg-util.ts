/** Small helpers around pg errors and waiting. */

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
