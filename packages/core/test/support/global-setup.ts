/** Vitest global setup: core's migrations in a template database per test run (db.ts). */
import { templateSetup } from '@cyclone/testkit';
import { migrateCore } from '../../src/migrate.js';
import { TEMPLATE_ENV } from './db.js';

export default templateSetup(TEMPLATE_ENV, (pool) => migrateCore(pool, 'cyclone'));
