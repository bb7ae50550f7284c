/**
 * Test databases: one real PostgreSQL database per test file, cloned from a migrated template
 * made once per test run (global-setup.ts). `CREATE DATABASE … TEMPLATE …` takes ~60 ms here.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';

/** The server tests use: `DATABASE_URL`, default the local trust-auth server. */
export const ADMIN_URL = process.env.DATABASE_URL ?? 'postgres://root@127.0.0.1:5432/test';

/** Name of the migrated template database (set by global-setup, per test run). */
export function templateName(): string {
  const name = process.env.CYCLONE_TEST_TEMPLATE;
  if (!name)
    throw new Error('CYCLONE_TEST_TEMPLATE is not set: run tests through vitest (global-setup)');
  return name;
}

/** `ADMIN_URL` with its database replaced by `db`. */
export function urlFor(db: string): string {
  const u = new URL(ADMIN_URL);
  u.pathname = `/${db}`;
  return u.toString();
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

/** Clones the migrated template into a fresh database for one test file. */
export async function createTestDb(): Promise<TestDb> {
  const name = `cyclone_t_${randomBytes(6).toString('hex')}`;
  const admin = new pg.Client({ connectionString: ADMIN_URL });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE "${name}" TEMPLATE "${templateName()}"`);
  } finally {
    await admin.end();
  }
  const url = urlFor(name);
  const pool = new pg.Pool({ connectionString: url, max: 5 });
  pool.on('error', () => {});
  return {
    name,
    url,
    pool,
    async drop() {
      await pool.end().catch(() => {});
      const a = new pg.Client({ connectionString: ADMIN_URL });
      await a.connect();
      try {
        await a.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
      } finally {
        await a.end();
      }
    },
  };
}
