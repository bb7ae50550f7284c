/**
 * Vitest global setup: a template database per test run (db.ts), migrated with core's and the
 * ledger's migrations, then this package's table.
 */
import { Client } from '@cyclone/core';
import { migrateIdempotency } from '@cyclone/idempotency';
import { templateSetup } from '@cyclone/testkit';
import { migrateTwilio } from '../../src/tables.js';
import { TEMPLATE_ENV } from './db.js';

export default templateSetup(TEMPLATE_ENV, async (pool) => {
  const client = new Client({ pool });
  await migrateIdempotency(client); // core first, then the ledger
  await migrateTwilio(client);
});
