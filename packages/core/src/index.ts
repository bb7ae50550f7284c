/**
 * `@cyclone/core`, the public API: define actions and workflows, submit and inspect runs with a
 * `Client`, run steps with a `Worker`, and catch the typed errors. Helpers shared with Cyclone's
 * other packages are on `@cyclone/core/internal`.
 */
export {
  Client,
  type ClientOptions,
  type DebouncedSubmitResult,
  type DebounceOptions,
  type DeleteFinishedRunsOptions,
  type DeleteFinishedRunsResult,
  type FinishedRunState,
  type ListRunsOptions,
  type ScheduleInfo,
  type SubmitManyResult,
  type SubmitOnceResult,
  type SubmitOptions,
  type SubmitResult,
  type TriggerScheduleResult,
  type WorkerInfo,
} from './client.js';
export type { Context } from './context.js';
export {
  type Action,
  type ActionNodeSpec,
  type ActionOptions,
  type Backoff,
  DEFAULT_BACKOFF_CAP_MS,
  DEFAULT_MAX_ATTEMPTS,
  DEFAULT_MAX_SNOOZES,
  defaultBackoff,
  type InputMapper,
  type NodeCondition,
  type NodeDef,
  type NodeSpec,
  newAction,
  newWorkflow,
  type WaitNodeSpec,
  type Workflow,
  type WorkflowSpec,
} from './definitions.js';
export {
  ConfigError,
  CycloneError,
  type CycloneErrorCode,
  InputValidationError,
  InvalidSignalError,
  InvalidStateError,
  LeaseLostError,
  LimitKeyError,
  MAX_DELAY_MS,
  NodeNotFoundError,
  NonRetryableError,
  PayloadError,
  RunNotFoundError,
  ScheduleNotFoundError,
  SnoozeError,
  StepTimeoutError,
  SubmitKeyConflictError,
  TransactionConflictError,
  type ValidationIssue,
  WaitTimeoutError,
  WorkflowDefinitionError,
} from './errors.js';
export { DEFAULT_MAX_PAYLOAD_BYTES } from './json.js';
export {
  type ActionLimits,
  type ConcurrencyLimit,
  type LimitKey,
  MAX_LIMIT,
  MAX_LIMIT_KEY_BYTES,
  type RateLimit,
} from './limits.js';
export { LIST_LIMITS_CAP, type ListLimitsOptions } from './list-limits.js';
export {
  consoleLogger,
  type Logger,
  type LogLevel,
  type StderrLoggerOptions,
  silentLogger,
  stderrLogger,
} from './logger.js';
export {
  type CatchUp,
  MAX_CATCH_UP,
  newSchedule,
  type Overlap,
  type Schedule,
  type ScheduleOptions,
} from './schedule.js';
export { MAX_SIGNAL_NAME_LENGTH } from './signal-name.js';
export type { SignalOptions, SignalResult } from './signals.js';
export {
  type Json,
  type LimitInfo,
  MAX_PRIORITY,
  MIN_PRIORITY,
  type RunInfo,
  type RunState,
  type RunSummary,
  type StepError,
  type StepErrorKind,
  type StepInfo,
  type StepState,
  type Tx,
} from './types.js';
export { Worker, type WorkerOptions, type WorkerStats } from './worker.js';
