/**
 * How the engine's statements are defined and sent: each module under `sql/` pairs a statement's
 * text, its typed parameters and a readable prepared-statement name, so what an operator sees in
 * `pg_stat_statements` or `pg_prepared_statements` says which statement it is.
 */
import { createHash } from 'node:crypto';

/** What a statement needs of its database: the quoted schema and whether to prepare. */
export interface SqlScope {
  /** The schema, validated and quoted (`schema.ts`). */
  readonly q: string;
  /**
   * Send the statement as a named prepared statement, parsed once per connection; false behind
   * a transaction-pooling proxy that cannot keep them.
   */
  readonly prepare: boolean;
  /** The NOTIFY channel workers LISTEN on (`cyclone_<schema>`). */
  readonly channel: string;
}

/**
 * Anything with pg's `query`: a `pg.Pool`, a `PoolClient`, or a caller's transaction (`Tx`), which
 * takes plain text only.
 */
export interface Queryable {
  // biome-ignore lint/suspicious/noExplicitAny: pg's own overloads are looser than any one shape
  query(textOrConfig: any, values?: unknown[]): Promise<{ rows: any[]; rowCount: number | null }>;
}

/** A statement ready to send: pg's query config, named when prepared. */
export interface StatementConfig {
  name?: string;
  text: string;
}

/**
 * The prepared-statement name of `text`: `cyclone_<name>_<8 hex of the text's SHA-256>`. The
 * digest keeps two schemas (or two engine versions) sharing a connection apart, since their texts
 * differ; the name says which statement it is. Within PostgreSQL's 63-byte identifier limit for
 * every name used here.
 */
export function preparedName(name: string, text: string): string {
  return `cyclone_${name}_${createHash('sha256').update(text).digest('hex').slice(0, 8)}`;
}

/**
 * Defines one statement: `build(q)` makes its text for a quoted schema; `prepared` says whether
 * it is sent as a named prepared statement (hot statements) or as plain text (operator and
 * inspection statements, run rarely). The returned function gives the statement's config for a
 * scope, built once per scope object and cached.
 */
export function defineStatement(
  name: string,
  build: (q: string) => string,
  prepared = true,
): (scope: SqlScope) => StatementConfig {
  const cache = new WeakMap<SqlScope, StatementConfig>();
  return (scope) => {
    let config = cache.get(scope);
    if (config === undefined) {
      const text = build(scope.q);
      config = prepared && scope.prepare ? { name: preparedName(name, text), text } : { text };
      cache.set(scope, config);
    }
    return config;
  };
}

/**
 * Sends a statement on `on`: as its config (named when prepared) on a pool or a pool client, as
 * plain text on a caller's transaction (`plainText`), whose `query` takes text only.
 */
export function send<R>(
  on: Queryable,
  config: StatementConfig,
  values: unknown[],
  plainText = false,
): Promise<{ rows: R[]; rowCount: number | null }> {
  return plainText || config.name === undefined
    ? on.query(config.text, values)
    : on.query(config, values);
}
