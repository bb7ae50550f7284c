/**
 * This package's migrations: the embedded copy is current, and `migrateTwilio` applies them once
 * through core's `applyMigrations` (component `twilio`), in any schema (@cyclone/testkit-engine).
 */
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { componentMigrationTests } from '@cyclone/testkit-engine';
import { migrateTwilio } from '../src/index.js';
import { createTestDb } from './support/db.js';

componentMigrationTests({
  migrateName: 'migrateTwilio',
  migrate: migrateTwilio,
  packageDir: join(dirname(fileURLToPath(import.meta.url)), '..'),
  otherSchema: 'twilio_other',
  table: 'cyclone_twilio_callbacks',
  createTestDb,
});
