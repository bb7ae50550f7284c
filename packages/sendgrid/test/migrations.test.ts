/**
 * This package's migrations: the embedded copy is current, and `migrateSendgrid` applies them once
 * through core's `applyMigrations` (component `sendgrid`), in any schema.
 */
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client } from '@cyclone/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrateSendgrid } from '../src/index.js';
import { createTestDb, type TestDb } from './support/db.js';

let db: TestDb;
beforeAll(async () => {
  db = await createTestDb();
});
afterAll(async () => {
  await db?.drop();
});

describe('migrations', () => {
  it('the embedded migrations match migrations/*.sql', async () => {
    const here = dirname(fileURLToPath(import.meta.url));
    // @ts-expect-error: a plain .mjs script without types
    const { render } = await import('../../../scripts/embed-migrations.mjs');
    const generated = readFileSync(join(here, '..', 'src', 'migrations.generated.ts'), 'utf8');
    expect(generated).toBe(render(join(here, '..', 'migrations')));
  });

  it('migrateSendgrid applies the table once, concurrently safe, in another schema too', async () => {
    const other = new Client({ connectionString: db.url, poolSize: 2, schema: 'sendgrid_other' });
    try {
      await other.migrate();
      const [a, b] = await Promise.all([migrateSendgrid(other), migrateSendgrid(other)]);
      expect([...a, ...b]).toHaveLength(1);
      expect(await migrateSendgrid(other)).toEqual([]);
      const { rows } = await db.pool.query(
        `SELECT count(*)::int AS n FROM information_schema.tables
         WHERE table_schema = 'sendgrid_other' AND table_name = 'cyclone_sendgrid_events'`,
      );
      expect(rows[0]?.n).toBe(1);
    } finally {
      await other.close();
    }
  });
});
