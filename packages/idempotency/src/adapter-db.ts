/**
 * How an adapter reaches its own tables (the SendGrid events, the Twilio status callbacks): a
 * `query`-able pool and the Cyclone schema. Each adapter migrates them under its own component
 * with core's `migrateComponent`, and quotes the schema with core's `quoteSchema`.
 */

/** Anything with pg's `query` (a `pg.Pool`, a `PoolClient`, a handler's `Tx`). */
export interface Queryable {
  query(
    text: string,
    values?: unknown[],
  ): Promise<{ rows: Record<string, unknown>[]; rowCount: number | null }>;
}

/** Where an adapter's tables live. A core `Client` (`{ pool, schema }`) fits as it is. */
export interface AdapterDb {
  /** The pool (or any `query`-able) of the Cyclone database. */
  pool: Queryable;
  /** The Cyclone schema. Default `cyclone`. */
  schema?: string;
}
