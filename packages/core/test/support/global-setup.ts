/**
 * Vitest global setup: makes one migrated template database per test run, which every test file
 * clones (db.ts), and drops it at the end.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { migrateCore } from '../../src/migrate.js';
import { ADMIN_URL, urlFor } from './db.js';

export default async function setup(): Promise<() => Promise<void>> {
  const name = `cyclone_tpl_${randomBytes(6).toString('hex')}`;
  const admin = new pg.Client({ connectionString: ADMIN_URL });
  await admin.connect();
  await admin.query(`CREATE DATABASE "${name}"`);
  const pool = new pg.Pool({ connectionString: urlFor(name), max: 1 });
  await migrateCore(pool, 'cyclone');
  await pool.end();
  process.env.CYCLONE_TEST_TEMPLATE = name;
  return async () => {
    await admin.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
    await admin.end();
  };
}
