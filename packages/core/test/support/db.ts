/** Core's test databases: clones of the template that global-setup.ts migrates (@cyclone/testkit). */
import { createTestDb as cloneTemplate, type TestDb } from '@cyclone/testkit';
import type pg from 'pg';

export type { TestDb };

/** The variable naming core's migrated template, per test run. */
export const TEMPLATE_ENV = 'CYCLONE_TEST_TEMPLATE';

/** Clones the migrated template into a fresh database for one test file. */
export const createTestDb = (): Promise<TestDb> => cloneTemplate(TEMPLATE_ENV);

/**
 * Deadlocks PostgreSQL has detected in the current database since its statistics began
 * (`pg_stat_database.deadlocks`); read before and after to count a test's own.
 */
export async function deadlockCount(pool: pg.Pool): Promise<number> {
  const { rows } = await pool.query<{ deadlocks: string }>(
    'SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()',
  );
  return Number(rows[0]?.deadlocks);
}
