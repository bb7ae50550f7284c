/**
 * Waiting in tests: poll state with a deadline (never a fixed sleep), hold something until the
 * test lets it go (deferred), count rows, and bound concurrency.
 */
import type pg from 'pg';

export interface WaitOptions {
  /** Give up after this long. Default 20 s. */
  timeoutMs?: number;
  /** Pause between checks. Default 25 ms. */
  intervalMs?: number;
}

/**
 * Polls `check` until it returns a truthy value, and returns that value.
 * Errors thrown by `check` (e.g. a connection killed by the test) count as "not yet".
 * @throws Error naming `what` after `timeoutMs` (default 20 s), with the last value or error.
 */
export async function waitFor<T>(
  what: string,
  check: () => T | Promise<T>,
  options: WaitOptions = {},
): Promise<NonNullable<T>> {
  const timeoutMs = options.timeoutMs ?? 20_000;
  const intervalMs = options.intervalMs ?? 25;
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await check();
      if (v) return v as NonNullable<T>;
      last = v;
    } catch (err) {
      last = err;
    }
    if (Date.now() >= deadline) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what} (last: ${show(last)})`);
    }
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

/** A value or an error, readably, for a failure message. */
function show(v: unknown): string {
  if (v instanceof Error) return `${v.name}: ${v.message}`;
  try {
    return JSON.stringify(v) ?? String(v);
  } catch {
    return String(v);
  }
}

/** A promise with its resolve function exposed, to hold a handler until the test lets it go. */
export interface Deferred<T = void> {
  promise: Promise<T>;
  resolve(value: T): void;
  reject(err: unknown): void;
}

export function deferred<T = void>(): Deferred<T> {
  let resolve!: (v: T) => void;
  let reject!: (e: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/** `SELECT count(*)` of the rows of `text` as a number. */
export async function count(pool: pg.Pool, text: string, values: unknown[] = []): Promise<number> {
  const { rows } = await pool.query<{ n: string | number }>(
    `SELECT count(*) AS n FROM (${text}) AS t`,
    values,
  );
  return Number(rows[0]?.n ?? 0);
}

/** Runs `fn` over `items` with at most `limit` in flight; results in the order of `items`. */
export async function mapLimit<T, R>(
  items: readonly T[],
  limit: number,
  fn: (item: T, index: number) => Promise<R>,
): Promise<R[]> {
  const out: R[] = new Array(items.length);
  let next = 0;
  const lanes = Array.from({ length: Math.min(limit, items.length) }, async () => {
    for (;;) {
      const i = next++;
      if (i >= items.length) return;
      out[i] = await fn(items[i] as T, i);
    }
  });
  await Promise.all(lanes);
  return out;
}
