/**
 * Watches the engine's prepared statements on a caller-given pool, for tests that count what the
 * workers sharing it send.
 */
import type pg from 'pg';

/**
 * Wraps `pool.query` so that `seen(name, values)` is called for every named (prepared) statement
 * before it goes out; everything is still sent as before. The engine sends prepared statements as
 * `(config, values)`, so `values` is the second argument (empty when there is none).
 */
export function watchStatements(
  pool: pg.Pool,
  seen: (name: string, values: readonly unknown[]) => void,
): void {
  const query = pool.query.bind(pool) as (...a: unknown[]) => Promise<unknown>;
  (pool as unknown as { query: unknown }).query = (...args: unknown[]) => {
    const c = args[0];
    const name = typeof c === 'object' && c !== null ? (c as { name?: string }).name : undefined;
    if (name) seen(name, Array.isArray(args[1]) ? args[1] : []);
    return query(...args);
  };
}
