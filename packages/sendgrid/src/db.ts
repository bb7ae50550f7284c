/**
 * This package's table (the Event Webhook events, migrations/000001_events.sql) and how to
 * reach it: a pool and the Cyclone schema. A core `Client` fits `SendgridDb` as it is.
 */
import { applyMigrations, DEFAULT_SCHEMA } from '@cyclone/core';
import { migrations } from './migrations.generated.js';

/** The component name of this package's migrations in `cyclone_migrations`. */
export const MIGRATION_COMPONENT = 'sendgrid';

/** Anything with pg's `query` (a `pg.Pool`, a `PoolClient`, a handler's `Tx`). */
export interface Queryable {
  query(
    text: string,
    values?: unknown[],
  ): Promise<{ rows: Record<string, unknown>[]; rowCount: number | null }>;
}

/** Where the events table lives. A core `Client` (`{ pool, schema }`) fits as it is. */
export interface SendgridDb {
  /** The pool (or any `query`-able) of the Cyclone database. */
  pool: Queryable;
  /** The Cyclone schema. Default `cyclone`. */
  schema?: string;
}

/** A schema name: lower-case letter or `_`, then lower-case letters, digits or `_`; ≤ 63 bytes (as core). */
const SCHEMA_NAME = /^[a-z_][a-z0-9_]{0,62}$/;

/**
 * Validates a schema name and returns it double-quoted for SQL (the rule of core's schema.ts).
 * @throws TypeError when it is not a plain lower-case identifier.
 */
export function quoteSchema(name: string = DEFAULT_SCHEMA): string {
  if (typeof name !== 'string' || !SCHEMA_NAME.test(name)) {
    throw new TypeError(
      `schema name ${JSON.stringify(name)} is not a plain identifier (lower-case letter or _, then lower-case letters, digits or _, at most 63 characters)`,
    );
  }
  return `"${name}"`;
}

/**
 * Applies this package's migrations (component `sendgrid`) through core's `applyMigrations`:
 * advisory-locked, idempotent. Run it after core's and idempotency's migrations.
 * @param db a core `Client`, or `{ pool, schema }` with a `pg.Pool`.
 * @returns the names of the migrations applied now.
 */
export function migrateSendgrid(db: {
  pool: Parameters<typeof applyMigrations>[0];
  schema?: string;
}): Promise<string[]> {
  return applyMigrations(db.pool, db.schema ?? DEFAULT_SCHEMA, MIGRATION_COMPONENT, migrations);
}
