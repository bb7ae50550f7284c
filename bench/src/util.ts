/** Small helpers shared by the harness and its worker child processes. */
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';

/** Resolves after `ms` milliseconds. */
export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/**
 * Monotonic time in nanoseconds (CLOCK_MONOTONIC, the same clock in every process of the
 * machine, so a timestamp taken in the producer can be compared with one taken in a worker).
 */
export const nowNs = (): bigint => process.hrtime.bigint();

/** Milliseconds between two `nowNs()` readings. */
export const msBetween = (from: bigint, to: bigint): number => Number(to - from) / 1e6;

/** The value at quantile `q` (0..1) of `values`, linear interpolation; NaN when empty. */
export function quantile(values: readonly number[], q: number): number {
  if (values.length === 0) return Number.NaN;
  const s = [...values].sort((a, b) => a - b);
  const pos = (s.length - 1) * q;
  const lo = Math.floor(pos);
  const hi = Math.ceil(pos);
  const a = s[lo] as number;
  const b = s[hi] as number;
  return a + (b - a) * (pos - lo);
}

export const median = (values: readonly number[]) => quantile(values, 0.5);

/** Runs `fn` over `items` with at most `limit` calls in flight. */
export async function mapLimit<T>(
  items: readonly T[],
  limit: number,
  fn: (item: T, index: number) => Promise<void>,
): Promise<void> {
  let next = 0;
  const lanes = Array.from({ length: Math.min(limit, items.length) }, async () => {
    while (next < items.length) {
      const i = next++;
      await fn(items[i] as T, i);
    }
  });
  await Promise.all(lanes);
}

/** Splits `n` into chunks of at most `size`. */
export function chunks(n: number, size: number): number[] {
  const out: number[] = [];
  for (let left = n; left > 0; left -= size) out.push(Math.min(size, left));
  return out;
}

/** `postgres://…/x` with its database replaced by `db`. */
export function urlFor(base: string, db: string): string {
  const u = new URL(base);
  u.pathname = `/${db}`;
  return u.toString();
}

/** An error's message, whatever was thrown. */
export function errMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/**
 * The version of an installed package, read from its package.json (found by walking up from
 * the module it resolves to, since not every package exports `./package.json`).
 */
export function packageVersion(name: string): string {
  const req = createRequire(import.meta.url);
  let dir = dirname(req.resolve(name));
  for (;;) {
    const file = join(dir, 'package.json');
    if (existsSync(file)) {
      const pkg = JSON.parse(readFileSync(file, 'utf8')) as { name?: string; version?: string };
      if (pkg.name === name) return pkg.version ?? '?';
    }
    const up = dirname(dir);
    if (up === dir) return '?';
    dir = up;
  }
}
