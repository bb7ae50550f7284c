/**
 * The migration tests every package with tables of its own repeats: its embedded migrations are
 * current, and its migrate function applies them once, safely when called concurrently, in any
 * schema. One definition, called from each package's test/migrations.test.ts.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Client } from '@cyclone/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

/** What a package's migration tests need. */
export interface ComponentMigrationTests {
  /** The migrate function's name, for the test titles (`migrateSendgrid`). */
  migrateName: string;
  /** Applies the package's migrations in the client's schema; returns the names applied. */
  migrate(client: Client): Promise<string[]>;
  /** The package's folder (holds migrations/ and src/migrations.generated.ts). */
  packageDir: string;
  /** A schema to migrate into besides the default one. */
  otherSchema: string;
  /** The table the migrations create. */
  table: string;
  /** The package's isolated-database helper. */
  createTestDb(): Promise<{
    url: string;
    pool: { query(text: string, values?: unknown[]): Promise<{ rows: { n?: unknown }[] }> };
    drop(): Promise<void>;
  }>;
}

/** Defines the `migrations` describe block for one package (see the module comment). */
export function componentMigrationTests(o: ComponentMigrationTests): void {
  let db: Awaited<ReturnType<ComponentMigrationTests['createTestDb']>>;
  beforeAll(async () => {
    db = await o.createTestDb();
  });
  afterAll(async () => {
    await db?.drop();
  });

  describe('migrations', () => {
    it('the embedded migrations match migrations/*.sql', async () => {
      // @ts-expect-error: a plain .mjs script without types
      const { render } = await import('../../../scripts/embed-migrations.mjs');
      const generated = readFileSync(join(o.packageDir, 'src', 'migrations.generated.ts'), 'utf8');
      expect(generated).toBe(render(join(o.packageDir, 'migrations')));
    });

    it(`${o.migrateName} applies the table once, concurrently safe, in another schema too`, async () => {
      const other = new Client({ connectionString: db.url, poolSize: 2, schema: o.otherSchema });
      try {
        await other.migrate();
        const [a, b] = await Promise.all([o.migrate(other), o.migrate(other)]);
        expect([...a, ...b]).toHaveLength(1);
        expect(await o.migrate(other)).toEqual([]);
        const { rows } = await db.pool.query(
          `SELECT count(*)::int AS n FROM information_schema.tables
           WHERE table_schema = $1 AND table_name = $2`,
          [o.otherSchema, o.table],
        );
        expect(rows[0]?.n).toBe(1);
      } finally {
        await other.close();
      }
    });
  });
}
