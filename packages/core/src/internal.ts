/**
 * `@cyclone/core/internal`: what Cyclone's own packages (@cyclone/idempotency, the adapters,
 * @cyclone/ui) share with core and applications should not need. No stability promise beyond
 * the release of core it ships with: sibling packages pin core's minor version.
 */
export { canonicalJson, hashJson, isStorableText, storableText, toJson } from './json.js';
export { applyMigrations, type Migration, migrateComponent } from './migrate.js';
export { isConnectionError, isTransactionConflict, sleep } from './pg-util.js';
export { REDACTED, redactSecrets } from './redact.js';
export { DEFAULT_SCHEMA, quoteSchema } from './schema.js';
export {
  joinRunSql,
  selectStepHeld,
  stepHeldSql,
  stepReopenedBetweenSql,
  stepRunningSql,
} from './sql/fence.js';
