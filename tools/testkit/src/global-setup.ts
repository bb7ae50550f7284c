/**
 * The vitest global setup of a package's Postgres tests: one template database per test run,
 * migrated once, which every test file clones (`createTestDb`), and dropped at the end.
 */
import pg from 'pg';
import { dropDatabase, uniqueDbName, urlFor, withAdmin } from './db.js';

/**
 * Migrates a fresh template database through `pool` (one connection on it): the package's own
 * migrations and those of the packages it builds on. The pool is closed afterwards.
 */
export type MigrateTemplate = (pool: pg.Pool) => Promise<unknown>;

/**
 * Builds a vitest global setup (the default export of test/support/global-setup.ts): creates a
 * template database, runs `migrate` on it and names it in `process.env[templateEnv]`, which the
 * test files' `createTestDb(templateEnv)` read. Its teardown drops the template; so does a failed
 * migration, before the error is rethrown.
 *
 * `templateEnv` must be the package's own variable: under the root `vitest run` every project's
 * global setup runs in this one process.
 */
export function templateSetup(
  templateEnv: string,
  migrate: MigrateTemplate,
): () => Promise<() => Promise<void>> {
  return async function setup() {
    const name = uniqueDbName('cyclone_tpl_');
    await withAdmin((admin) => admin.query(`CREATE DATABASE "${name}"`));
    try {
      const pool = new pg.Pool({ connectionString: urlFor(name), max: 1 });
      pool.on('error', () => {});
      try {
        await migrate(pool);
      } finally {
        await pool.end().catch(() => {});
      }
    } catch (err) {
      await dropDatabase(name).catch(() => {});
      throw err;
    }
    process.env[templateEnv] = name;
    return async function teardown() {
      if (process.env[templateEnv] === name) delete process.env[templateEnv];
      await dropDatabase(name);
    };
  };
}
