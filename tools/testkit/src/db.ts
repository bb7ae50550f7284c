/**
 * Test databases: one real PostgreSQL database per test file, cloned from a template database
 * migrated once per test run (`templateSetup`, global-setup.ts). `CREATE DATABASE … TEMPLATE …`
 * takes ~60 ms here (graphile-worker's approach).
 *
 * Each package names its template in its own environment variable (`CYCLONE_TEST_TEMPLATE`,
 * `CYCLONE_STRIPE_TEST_TEMPLATE`…): under the root `vitest run` every project's global setup runs
 * in one process, and another package's template lacks this package's tables.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';

/** The server tests use: `DATABASE_URL`, default the local trust-auth server. */
export const ADMIN_URL = process.env.DATABASE_URL ?? 'postgres://root@127.0.0.1:5432/test';

/** `ADMIN_URL` with its database replaced by `db`. */
export function urlFor(db: string): string {
  const u = new URL(ADMIN_URL);
  u.pathname = `/${db}`;
  return u.toString();
}

/** A fresh database name: `prefix` and 12 random hex digits (a valid unquoted identifier). */
export function uniqueDbName(prefix: string): string {
  return `${prefix}${randomBytes(6).toString('hex')}`;
}

/**
 * Runs `fn` on a new connection to the server's admin database, closed afterwards.
 * Statements such as CREATE/DROP DATABASE cannot run on a pool or inside a transaction.
 */
export async function withAdmin<T>(fn: (admin: pg.Client) => Promise<T>): Promise<T> {
  const admin = new pg.Client({ connectionString: ADMIN_URL });
  // A connection that dies while idle emits 'error'; unhandled, it would crash the process.
  admin.on('error', () => {});
  await admin.connect();
  try {
    return await fn(admin);
  } finally {
    await admin.end().catch(() => {});
  }
}

/** Drops database `name` if it exists, terminating the connections still on it. */
export async function dropDatabase(name: string): Promise<void> {
  await withAdmin((admin) => admin.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`));
}

/**
 * The name of the migrated template in `templateEnv`, set by `templateSetup` (global-setup.ts).
 * @throws when the variable is unset: the test did not run through vitest.
 */
export function templateName(templateEnv: string): string {
  const name = process.env[templateEnv];
  if (!name) throw new Error(`${templateEnv} is not set: run tests through vitest (global-setup)`);
  return name;
}

export interface TestDb {
  /** Database name. */
  name: string;
  /** Connection string of the isolated database. */
  url: string;
  /** A pool on it for assertions (max 5). */
  pool: pg.Pool;
  /** Drops the database (terminating leftover connections). */
  drop(): Promise<void>;
}

/** Clones the template named in `templateEnv` into a fresh database for one test file. */
export async function createTestDb(templateEnv: string): Promise<TestDb> {
  const template = templateName(templateEnv);
  const name = uniqueDbName('cyclone_t_');
  await withAdmin((admin) => admin.query(`CREATE DATABASE "${name}" TEMPLATE "${template}"`));
  const url = urlFor(name);
  const pool = new pg.Pool({ connectionString: url, max: 5 });
  pool.on('error', () => {});
  return {
    name,
    url,
    pool,
    async drop() {
      await pool.end().catch(() => {});
      await dropDatabase(name);
    },
  };
}
