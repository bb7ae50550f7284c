/**
 * Small helpers for in-process tests: wait on database state (never on fixed sleeps), control a
 * handler from the test (deferred), and capture what a worker logs.
 */
import type pg from 'pg';
import type { Logger } from '../../src/logger.js';

/**
 * Polls `check` until it returns a truthy value, and returns that value.
 * Errors thrown by `check` (e.g. a connection killed by the test) count as "not yet".
 * @throws Error naming `what` after `timeoutMs` (default 20 s), with the last value or error.
 */
export async function waitFor<T>(
  what: string,
  check: () => T | Promise<T>,
  options: { timeoutMs?: number; intervalMs?: number } = {},
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

function show(v: unknown): string {
  if (v instanceof Error) return `${v.name}: ${v.message}`;
  try {
    return JSON.stringify(v);
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

/** One captured log entry: level, message and the merged bindings/object. */
export interface LogEntry {
  level: 'debug' | 'info' | 'warn' | 'error';
  msg: string | undefined;
  data: Record<string, unknown>;
}

/** A pino-compatible logger that keeps every entry in `entries` (child bindings merged). */
export function captureLogger(): { logger: Logger; entries: LogEntry[]; text(): string } {
  const entries: LogEntry[] = [];
  const make = (bindings: Record<string, unknown>): Logger => {
    const write = (level: LogEntry['level']) => (obj: object, msg?: string) => {
      entries.push({ level, msg, data: { ...bindings, ...(obj as Record<string, unknown>) } });
    };
    return {
      debug: write('debug'),
      info: write('info'),
      warn: write('warn'),
      error: write('error'),
      child: (more) => make({ ...bindings, ...(more as Record<string, unknown>) }),
    };
  };
  return {
    logger: make({}),
    entries,
    text: () =>
      entries
        .map((e) =>
          JSON.stringify({ level: e.level, msg: e.msg, ...e.data }, (_k, v) =>
            v instanceof Error ? { ...v, name: v.name, message: v.message } : v,
          ),
        )
        .join('\n'),
  };
}

/** `SELECT count(*)` as a number. */
export async function count(pool: pg.Pool, text: string, values: unknown[] = []): Promise<number> {
  const { rows } = await pool.query<{ n: string | number }>(
    `SELECT count(*) AS n FROM (${text}) AS t`,
    values,
  );
  return Number(rows[0]?.n ?? 0);
}

/** Runs `fn` over `items` with at most `limit` in flight. */
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
