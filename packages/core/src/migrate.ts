/**
 * Migrations: append-only SQL files (migrations/*.sql), embedded at build time, recorded in
 * `<schema>.cyclone_migrations`, applied in one transaction under an advisory lock, so two
 * concurrent `migrate` calls are safe: the second waits, then finds nothing to do.
 */
import type pg from 'pg';
import { withConnection } from './db.js';
import { migrations as coreMigrations } from './migrations.generated.js';
import { DEFAULT_SCHEMA, quoteSchema } from './schema.js';

/** One migration: a name that sorts in apply order and its SQL, with `{{schema}}` placeholders. */
export interface Migration {
  name: string;
  sql: string;
}

/**
 * Applies `migrations` of `component` that are not yet recorded, in name order, in one
 * transaction under a transaction-level advisory lock keyed by the schema. Other packages
 * (`@cyclone/idempotency`) use it with their own component name.
 * @returns the names applied now (empty when up to date).
 * @throws ConfigError on a bad schema name; the database error of a failing migration (nothing
 *   of that call is applied).
 */
export async function applyMigrations(
  pool: pg.Pool,
  schema: string,
  component: string,
  migrations: readonly Migration[],
): Promise<string[]> {
  const q = quoteSchema(schema);
  return withConnection(pool, async (client) => {
    try {
      await client.query('BEGIN');
      await client.query('SELECT pg_advisory_xact_lock(hashtextextended($1, 0))', [
        `cyclone:migrate:${schema}`,
      ]);
      await client.query(`CREATE SCHEMA IF NOT EXISTS ${q}`);
      await client.query(
        `CREATE TABLE IF NOT EXISTS ${q}.cyclone_migrations (
           component  text        NOT NULL,
           name       text        NOT NULL,
           applied_at timestamptz NOT NULL DEFAULT now(),
           PRIMARY KEY (component, name))`,
      );
      const { rows } = await client.query<{ name: string }>(
        `SELECT name FROM ${q}.cyclone_migrations WHERE component = $1`,
        [component],
      );
      const done = new Set(rows.map((r) => r.name));
      const applied: string[] = [];
      for (const m of [...migrations].sort((a, b) => a.name.localeCompare(b.name))) {
        if (done.has(m.name)) continue;
        await client.query(m.sql.replaceAll('{{schema}}', q));
        await client.query(
          `INSERT INTO ${q}.cyclone_migrations (component, name) VALUES ($1, $2)`,
          [component, m.name],
        );
        applied.push(m.name);
      }
      await client.query('COMMIT');
      return applied;
    } catch (err) {
      await client.query('ROLLBACK').catch(() => {});
      throw err;
    }
  });
}

/** Applies the core migrations (component `core`). See `applyMigrations`. */
export function migrateCore(pool: pg.Pool, schema: string): Promise<string[]> {
  return applyMigrations(pool, schema, 'core', coreMigrations);
}

/**
 * Applies the migrations of a package built on core (`@cyclone/sendgrid`, `@cyclone/twilio`…)
 * under its own `component` name, in `db`'s schema (default `cyclone`): `applyMigrations`,
 * advisory-locked and idempotent. Run it after core's migrations.
 * @param db a core `Client`, or `{ pool, schema }` with a `pg.Pool`.
 * @returns the names applied now (empty when up to date).
 * @throws ConfigError on a bad schema name; the database error of a failing migration.
 */
export function migrateComponent(
  db: { pool: pg.Pool; schema?: string },
  component: string,
  migrations: readonly Migration[],
): Promise<string[]> {
  return applyMigrations(db.pool, db.schema ?? DEFAULT_SCHEMA, component, migrations);
}
