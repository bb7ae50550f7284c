/**
 * How an adapter reaches its own tables (the SendGrid events, the Twilio status callbacks): a
 * `query`-able pool and the Cyclone schema, and `defineAdapterTables`, which migrates them under
 * the adapter's own component name and quotes the schema for its statements.
 */
import { type Migration, migrateComponent } from '@cyclone/core/internal';

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

/** What an adapter's migrations are applied to: a core `Client`, or `{ pool, schema }`. */
export type AdapterMigrationDb = Parameters<typeof migrateComponent>[0];

/** One adapter's own tables, as `defineAdapterTables` returns them. */
export interface AdapterTables {
  /** The component name of the adapter's migrations in `cyclone_migrations`. */
  readonly component: string;
  /**
   * Applies the adapter's migrations under its component in `db`'s schema (default `cyclone`):
   * advisory-locked and idempotent, so concurrent calls are safe. Run it after core's and the
   * ledger's migrations. Safe to pass around detached (`const migrate = tables.migrate`).
   * @returns the names of the migrations applied now (empty when up to date).
   * @throws ConfigError on a bad schema name; the database error of a failing migration.
   */
  readonly migrate: (db: AdapterMigrationDb) => Promise<string[]>;
}

/**
 * The tables of an adapter: its `migrations` (embedded from its `migrations/*.sql`, with
 * `{{schema}}` placeholders), applied under `component` by core's migration mechanism, and the
 * schema its statements address.
 * @param component the name its migrations are recorded under, e.g. `sendgrid`.
 */
export function defineAdapterTables(
  component: string,
  migrations: readonly Migration[],
): AdapterTables {
  return {
    component,
    migrate: (db) => migrateComponent(db, component, migrations),
  };
}
