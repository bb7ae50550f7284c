/**
 * This package's migrations: the embedded copy is current, and `migrateSendgrid` applies them once
 * through core's `applyMigrations` (component `sendgrid`), in any schema (@cyclone/testkit-engine).
 */
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { componentMigrationTests } from '@cyclone/testkit-engine';
import { migrateSendgrid } from '../src/index.js';
import { createTestDb } from './support/db.js';

componentMigrationTests({
  migrateName: 'migrateSendgrid',
  migrate: migrateSendgrid,
  packageDir: join(dirname(fileURLToPath(import.meta.url)), '..'),
  otherSchema: 'sendgrid_other',
  table: 'cyclone_sendgrid_events',
  createTestDb,
});
