/**
 * `@cyclone/core/internal`: what Cyclone's own packages (@cyclone/idempotency, the adapters,
 * @cyclone/ui) share with core and applications should not need. No stability promise beyond
 * the release of core it ships with: sibling packages pin core's minor version.
 */

export {
  type Db,
  isConnectionError,
  isTransactionConflict,
  type RetryPolicy,
  retryTransient,
  sleep,
  withConnection,
  withTransaction,
} from './db.js';
export {
  describeError,
  errorEntry,
  MAX_ERROR_MESSAGE_CHARS,
  MAX_ERROR_STACK_CHARS,
  storableErrorText,
} from './error-entry.js';
export { isNonRetryable, zodIssues } from './errors.js';
export { canonicalJson, hashJson, isStorableText, storableText, toJson } from './json.js';
export { applyMigrations, type Migration, migrateComponent } from './migrate.js';
export { REDACTED, redactSecrets } from './redact.js';
export { DEFAULT_SCHEMA, quoteSchema } from './schema.js';
export {
  joinRunSql,
  selectStepHeld,
  stepHeldSql,
  stepReopenedBetweenSql,
  stepRunningSql,
} from './sql/fence.js';
export type { Queryable, SqlScope } from './sql/statement.js';
export { recordError, registeredMeter, registeredTracer } from './telemetry.js';
export {
  BadQueryError,
  type CappedCount,
  createUiReader,
  type IsoTime,
  QueryTimeoutError,
  type UiHealth,
  type UiLookupHit,
  type UiOverview,
  type UiPayload,
  type UiReader,
  type UiReaderOptions,
  type UiRunDetail,
  type UiRunRow,
  type UiRunsFilter,
  type UiRunsPage,
  type UiStepDetail,
  type UiStepError,
  type UiStepSummary,
  type UiThroughput,
  type UiThroughputWindow,
  type UiWorker,
  type UiWorkflow,
} from './ui-reader.js';
export { NO_HEARTBEAT } from './worker.js';
