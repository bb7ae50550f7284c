/**
 * Services shared by the workers on one caller-given pool (workers of one `Client` made with a
 * pool of the caller's): the completion batcher, the claim, the heartbeat, the registry report and
 * the recovery sweep, one per pool and key (schema and settings), made by the first worker that
 * asks. Held by the pool weakly, so they go with it.
 */
import type pg from 'pg';

/** One service of type `T` per pool and key, made on first use. */
export class PerPool<K, T> {
  private readonly byPool = new WeakMap<pg.Pool, Map<K, T>>();

  /** The service of `pool` for `key`, made by `make` the first time. */
  get(pool: pg.Pool, key: K, make: () => T): T {
    let byKey = this.byPool.get(pool);
    if (!byKey) {
      byKey = new Map();
      this.byPool.set(pool, byKey);
    }
    let s = byKey.get(key);
    if (s === undefined) {
      s = make();
      byKey.set(key, s);
    }
    return s;
  }

  /** The service of `pool` for `key`, if one was made and not deleted. */
  peek(pool: pg.Pool, key: K): T | undefined {
    return this.byPool.get(pool)?.get(key);
  }

  /** Forgets the service of `pool` for `key` (its last worker stopped). */
  delete(pool: pg.Pool, key: K): void {
    this.byPool.get(pool)?.delete(key);
  }
}
