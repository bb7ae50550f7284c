export {
  type AdapterDb,
  type AdapterMigrationDb,
  type AdapterTables,
  defineAdapterTables,
  type Queryable,
} from './adapter-db.js';
export {
  DEADLINE_EXCEEDED,
  DEADLINE_NOT_CONNECTED,
  DEADLINE_QUIET_MARGIN_MS,
  type DeadlineAgentOptions,
  deadlineAgent,
  deadlineQuietPeriodMs,
  ProviderDeadlineError,
} from './deadline.js';
export {
  AmbiguousOutcomeError,
  DefinitiveFailureError,
  IdempotencyConflictError,
  IdempotencyKeyError,
  IdempotencyMismatchError,
  IdempotencyPayloadError,
  IdempotencyUsageError,
  InProgressError,
  NotSentError,
  OutcomeError,
  QUIET_PERIOD_MARGIN_MS,
  RateLimitedError,
  type StoredFailure,
  UnknownOutcomeError,
} from './errors.js';
export {
  BOUND_DIGEST_LENGTH,
  boundKey,
  idempotencyKey,
  MAX_SCOPE_LENGTH,
  MIN_KEY_LIMIT,
  nativeKey,
} from './key.js';
export {
  getLedgerEntry,
  type LedgerEntry,
  type LedgerPhase,
  listLedgerEntries,
  migrateIdempotency,
  type ReapOptions,
  type Resolution,
  reapLedger,
  resolveKey,
} from './ledger.js';
export {
  type InsertOnceResult,
  insertOnce,
  type OnceWriteOptions,
  upsertOnce,
} from './on-conflict.js';
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
export {
  classifyError,
  classifyHttpStatus,
  isOutcome,
  OUTCOME_KINDS,
  type Outcome,
  type OutcomeKind,
} from './outcome.js';
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
export {
  countUnknownOutcomes,
  findIdempotencyKey,
  readLedgerOfRun,
  readUnknownOutcomes,
  type UiLedgerRow,
  type UiUnknownPage,
} from './ui-reads.js';
