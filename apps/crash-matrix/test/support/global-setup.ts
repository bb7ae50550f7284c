/** Vitest global setup: a template database with Cyclone's tables in the crash matrix's schema. */
import { Client } from '@cyclone/core';
import { templateSetup } from '@cyclone/testkit';
import { ENGINE_SCHEMA } from '../../src/workflows.js';
import { TEMPLATE_ENV } from './db.js';

export default templateSetup(TEMPLATE_ENV, (pool) =>
  new Client({ pool, schema: ENGINE_SCHEMA }).migrate(),
);
