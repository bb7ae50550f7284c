/**
 * Vitest global setup: a template database per test run, migrated with everything the checkout
 * needs (core, the ledger, the adapters' tables, the shop's tables).
 */
import { Client } from '@cyclone/core';
import { templateSetup } from '@cyclone/testkit';
import { migrateCheckout } from '../../src/schema.js';
import { TEMPLATE_ENV } from './db.js';

export default templateSetup(TEMPLATE_ENV, (pool) => migrateCheckout(new Client({ pool })));
