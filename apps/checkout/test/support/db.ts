/** The checkout's test databases: clones of the template global-setup.ts migrates. */
import { createTestDb as cloneTemplate, type TestDb } from '@cyclone/testkit';

export type { TestDb };

/** The variable naming this app's migrated template, per test run. */
export const TEMPLATE_ENV = 'CYCLONE_CHECKOUT_TEST_TEMPLATE';

/** A fresh database for one test file, with Cyclone's and the checkout's tables. */
export const createTestDb = (): Promise<TestDb> => cloneTemplate(TEMPLATE_ENV);
