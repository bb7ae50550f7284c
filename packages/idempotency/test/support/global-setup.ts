/**
 * Vitest global setup: a template database per test run (db.ts), migrated with core's migrations
 * and the ledger's through `migrateIdempotency`, the way users do it.
 */
import { Client } from '@cyclone/core';
import { templateSetup } from '@cyclone/testkit';
import { migrateIdempotency } from '../../src/ledger.js';
import { TEMPLATE_ENV } from './db.js';

export default templateSetup(TEMPLATE_ENV, (pool) => migrateIdempotency(new Client({ pool })));
