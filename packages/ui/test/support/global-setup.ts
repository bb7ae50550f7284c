/**
 * Vitest global setup: a template database per test run (db.ts), migrated with core's and the
 * ledger's migrations, so the ledger's reads have their table.
 */
import { Client } from '@cyclone/core';
import { migrateIdempotency } from '@cyclone/idempotency';
import { templateSetup } from '@cyclone/testkit';
import { TEMPLATE_ENV } from './db.js';

export default templateSetup(TEMPLATE_ENV, (pool) => migrateIdempotency(new Client({ pool })));
