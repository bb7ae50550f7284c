/**
 * `ON CONFLICT` helpers for Postgres side effects that must not wait for the step's completion:
 * a crash after such a write and before the step completes makes the next attempt write again,
 * and the `(run_id, node)` key turns that second write into a no-op.
 *
 * Prefer `ctx.completionTx()` for writes to Cyclone's own database: they then commit with the
 * step's completion or not at all — exactly once, no key needed. Use these helpers when the
 * write must be visible before the step completes (another system polls for it, a later call in
 * the same handler depends on it being committed) or goes to another database (pass its pool or
 * transaction as `db`). The write then commits at once on every attempt that gets there, so it
 * needs a key: the table must have `run_id` and `node` columns (and `scope` when used) with a
 * UNIQUE constraint or index on exactly `(run_id, node)` (or `(run_id, node, scope)`).
 */
import type { Context, Tx } from '@cyclone/core';
import { IdempotencyUsageError } from './errors.js';
import { checkScope } from './key.js';

/** Options of `insertOnce` and `upsertOnce`. */
export interface OnceWriteOptions {
  /**
   * The table, optionally schema-qualified (`audit.emails`). Each part is a plain identifier
   * (letters, digits, `_`, not starting with a digit, ≤ 63 characters), quoted as given.
   */
  table: string;
  /** Column → value, besides the key columns. Values travel as parameters (pg's conversion). */
  values: Record<string, unknown>;
  /** Adds a `scope` column to the key: one row per `(run_id, node, scope)`. */
  scope?: string;
  /** Where to write: a pool, a client or a transaction (pg's `query`). Default `ctx.client.pool`. */
  db?: Tx;
}

/** What `insertOnce` returns. */
export interface InsertOnceResult<R> {
  /** True when this call inserted the row; false when an earlier attempt had. */
  inserted: boolean;
  /** The row as stored (`RETURNING *`, or the existing row). */
  row: R;
}

const IDENT = /^[A-Za-z_][A-Za-z0-9_]{0,62}$/;
const KEY_COLUMNS = new Set(['run_id', 'node', 'scope']);

function quoteIdent(name: string, what: string): string {
  if (typeof name !== 'string' || !IDENT.test(name)) {
    throw new IdempotencyUsageError(
      `${what} ${JSON.stringify(name)} is not a plain identifier (letters, digits, _; at most 63 characters)`,
    );
  }
  return `"${name}"`;
}

interface Prepared {
  table: string;
  keyCols: string[];
  keyVals: unknown[];
  cols: string[];
  vals: unknown[];
  db: Tx;
}

function prepare(ctx: Pick<Context, 'runId' | 'node' | 'client'>, o: OnceWriteOptions): Prepared {
  if (!o || typeof o !== 'object') throw new IdempotencyUsageError('options are required');
  const parts = typeof o.table === 'string' ? o.table.split('.') : [];
  if (parts.length < 1 || parts.length > 2) {
    throw new IdempotencyUsageError(
      `table must be "name" or "schema.name", got ${JSON.stringify(o.table)}`,
    );
  }
  const table = parts.map((p) => quoteIdent(p, 'table name part')).join('.');
  if (!o.values || typeof o.values !== 'object' || Array.isArray(o.values)) {
    throw new IdempotencyUsageError('values must be an object of column → value');
  }
  const keyCols = ['"run_id"', '"node"'];
  const keyVals: unknown[] = [ctx.runId, ctx.node];
  if (o.scope !== undefined) {
    checkScope(o.scope);
    keyCols.push('"scope"');
    keyVals.push(o.scope);
  }
  const cols: string[] = [];
  const vals: unknown[] = [];
  for (const [k, v] of Object.entries(o.values)) {
    if (v === undefined) continue;
    if (KEY_COLUMNS.has(k)) {
      throw new IdempotencyUsageError(`values must not set the key column ${k}; it comes from ctx`);
    }
    cols.push(quoteIdent(k, 'column'));
    vals.push(v);
  }
  return { table, keyCols, keyVals, cols, vals, db: o.db ?? ctx.client.pool };
}

function insertSql(p: Prepared, onConflict: string): { text: string; values: unknown[] } {
  const all = [...p.keyCols, ...p.cols];
  const values = [...p.keyVals, ...p.vals];
  return {
    text: `INSERT INTO ${p.table} (${all.join(', ')}) VALUES (${values
      .map((_, i) => `$${i + 1}`)
      .join(', ')}) ON CONFLICT (${p.keyCols.join(', ')}) ${onConflict} RETURNING *`,
    values,
  };
}

/**
 * Inserts one row per step (or per step and scope): `INSERT … ON CONFLICT (run_id, node) DO
 * NOTHING`, so every attempt after the first leaves the row as the first attempt wrote it.
 * Commits at once on the default pool — see the module notes for when `ctx.completionTx()` is
 * the better tool.
 * @returns `{ inserted, row }`: the new row, or the one an earlier attempt inserted.
 * @throws IdempotencyUsageError for a bad table or column name, a key column in `values`;
 *   IdempotencyKeyError for a bad scope; the database's error (e.g. 42P10 when the table has no
 *   unique constraint on the key columns).
 */
export async function insertOnce<R extends Record<string, unknown> = Record<string, unknown>>(
  ctx: Pick<Context, 'runId' | 'node' | 'client'>,
  options: OnceWriteOptions,
): Promise<InsertOnceResult<R>> {
  const p = prepare(ctx, options);
  const { text, values } = insertSql(p, 'DO NOTHING');
  const ins = await p.db.query<R>(text, values);
  if (ins.rows[0]) return { inserted: true, row: ins.rows[0] };
  const where = p.keyCols.map((c, i) => `${c} = $${i + 1}`).join(' AND ');
  const found = await p.db.query<R>(`SELECT * FROM ${p.table} WHERE ${where}`, p.keyVals);
  if (!found.rows[0]) {
    throw new Error(
      `insertOnce: a row with this key exists but is not visible (a concurrent transaction of ${p.table} has not committed)`,
    );
  }
  return { inserted: false, row: found.rows[0] };
}

/**
 * Writes one row per step (or per step and scope), last attempt wins: `INSERT … ON CONFLICT
 * (run_id, node) DO UPDATE SET <values> = EXCLUDED.<values>`. For state that is safe to
 * overwrite (a status, a latest snapshot), not for effects that must happen once — use
 * `insertOnce` for those.
 * @returns the row as stored.
 * @throws as `insertOnce`; IdempotencyUsageError when `values` is empty.
 */
export async function upsertOnce<R extends Record<string, unknown> = Record<string, unknown>>(
  ctx: Pick<Context, 'runId' | 'node' | 'client'>,
  options: OnceWriteOptions,
): Promise<R> {
  const p = prepare(ctx, options);
  if (p.cols.length === 0) {
    throw new IdempotencyUsageError('upsertOnce needs at least one column in values');
  }
  const set = p.cols.map((c) => `${c} = EXCLUDED.${c}`).join(', ');
  const { text, values } = insertSql(p, `DO UPDATE SET ${set}`);
  const r = await p.db.query<R>(text, values);
  return r.rows[0] as R;
}
