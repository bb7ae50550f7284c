/** The crash matrix's test databases: clones of the template global-setup.ts migrates. */
import { createTestDb as cloneTemplate, type TestDb } from '@cyclone/testkit';

export type { TestDb };

/** The variable naming this app's migrated template, per test run. */
export const TEMPLATE_ENV = 'CYCLONE_CRASH_MATRIX_TEST_TEMPLATE';

export const createTestDb = (): Promise<TestDb> => cloneTemplate(TEMPLATE_ENV);
