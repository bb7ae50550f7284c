/**
 * The ui tests' databases: clones of the template that global-setup.ts migrates
 * (@cyclone/testkit).
 */
import { createTestDb as cloneTemplate, type TestDb } from '@cyclone/testkit';

export type { TestDb };

/** The variable naming this package's migrated template, per test run. */
export const TEMPLATE_ENV = 'CYCLONE_UI_TEST_TEMPLATE';

/** Clones the migrated template into a fresh database for one test file. */
export const createTestDb = (): Promise<TestDb> => cloneTemplate(TEMPLATE_ENV);
