export {
  type AdapterDb,
  type AdapterMigrationDb,
  type AdapterTables,
  defineAdapterTables,
  type Queryable,
} from './adapter-db.js';
export * from './errors.js';
export {
  BOUND_DIGEST_LENGTH,
  boundKey,
  idempotencyKey,
  MAX_SCOPE_LENGTH,
  MIN_KEY_LIMIT,
  nativeKey,
} from './key.js';
export * from './ledger.js';
export * from './on-conflict.js';
export { once } from './once.js';
export {
  type CallInfo,
  DEFAULT_LOCK_TIMEOUT_MS,
  DEFAULT_QUIET_PERIOD_MS,
  type OnceOptions,
  type Reconcile,
  type ReconcileInfo,
  type UnknownPolicy,
} from './once-options.js';
export * from './outcome.js';
export {
  headerValue,
  parseRateLimitReset,
  parseRetryAfter,
  RATE_LIMIT_BACKOFF_BASE_MS,
  RATE_LIMIT_BACKOFF_CAP_MS,
  type ResponseHeaders,
  rateLimitBackoffMs,
  retryAfterMs,
} from './retry-after.js';
export { LEDGER_TABLE } from './sql.js';
