/**
 * The vocabulary shared by every module: stored values, states, and what inspection returns.
 * Imports nothing, so any module can use it without an import cycle.
 */

/** A JSON value as stored in `jsonb`. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** The pg-compatible query surface of the completion transaction (`pg.PoolClient#query`). */
export interface Tx {
  query<R extends Record<string, unknown> = Record<string, unknown>>(
    text: string,
    values?: unknown[],
  ): Promise<{ rows: R[]; rowCount: number | null }>;
}

/** Why a step's attempt failed, as recorded in its errors (see `StepError.kind`). */
export type StepErrorKind =
  | 'error'
  | 'non_retryable'
  | 'timeout'
  | 'lease_expired'
  | 'input_invalid'
  | 'output_invalid'
  | 'worker_stopped'
  | 'conflict'
  | 'snooze_limit'
  | 'condition_error'
  | 'limit_key_invalid';

/** The states of a run; `running` until it completes, fails or is cancelled. */
export type RunState = 'running' | 'completed' | 'failed' | 'cancelled';
/**
 * The states of a step (a node of a run); see docs/concepts.md for the transitions. `scheduled`:
 * waiting for its time (a delayed run, a node timer, a snooze); claimable once `scheduledAt` has
 * come by PostgreSQL's clock. A wait node waits `scheduled` for its signal or its deadline.
 * `skipped`: its condition was false (terminal; done, for its downstream nodes and the run).
 */
export type StepState =
  | 'pending'
  | 'available'
  | 'scheduled'
  | 'running'
  | 'retryable'
  | 'completed'
  | 'skipped'
  | 'discarded'
  | 'cancelled';

/** One recorded failed attempt of a step. `at` is an ISO-8601 timestamp. */
export interface StepError {
  attempt: number;
  at: string;
  message: string;
  /**
   * Why the attempt failed: `error` (the handler threw or rejected), `non_retryable`
   * (`NonRetryableError`), `timeout` (the action's timeout elapsed), `lease_expired` (recorded by
   * the recovery sweep: the worker died or stalled), `input_invalid` (the mapped input failed the
   * action's schema), `output_invalid` (the output is not storable JSON), `worker_stopped` (the
   * worker's stop grace period ran out; retried at once, and it counts as an attempt), `conflict`
   * (its `completionTx` lost a deadlock or serialization failure; retried at once, the attempt
   * given back), `snooze_limit` (the step snoozed its action's `maxSnoozes` times and asked
   * for one more), `condition_error` (the node's condition, `when`, threw), `limit_key_invalid`
   * (a limit's key function threw or returned no usable key, `LimitKeyError`; recorded before the
   * step's next attempt, with the attempt it had reached).
   */
  kind: StepErrorKind;
  stack?: string;
}

/** A node of a run as stored: what `Client.getRun` returns per step. */
export interface StepInfo {
  node: string;
  action: string;
  state: StepState;
  /** Claims so far (0 before the first). */
  attempt: number;
  maxAttempts: number;
  /** Upstream nodes not yet completed. */
  depsRemaining: number;
  /** The attempt the step had reached when an operator last reopened it; null if never. */
  reopenedAfterAttempt: number | null;
  output: Json | null;
  errors: StepError[];
  /** When the step is (or was) claimable: its time, for a scheduled or retryable step. */
  scheduledAt: Date;
  /** Times the step snoozed (`SnoozeError`): each one waited without using an attempt. */
  snoozes: number;
  leaseOwner: string | null;
  leaseExpiresAt: Date | null;
  startedAt: Date | null;
  completedAt: Date | null;
  /** The step's concurrency key (docs/flow-control.md); null when it has none (yet). */
  concurrencyKey: string | null;
  /** The step's rate-limit key; null when it has none (yet). */
  rateLimitKey: string | null;
  /** The run's priority (-1000 to 1000, higher claimed first; default 0). */
  priority: number;
  /**
   * A wait node's signal name (its `waitFor`; its `action` is `$wait`); null for an action node.
   * `client.signal(runId, waitFor)` is what completes it.
   */
  waitFor: string | null;
  /**
   * A wait node's deadline, fixed when it is reached (its `timeoutMs` then): after it, the node
   * completes with `{ timedOut: true }`. Null for an action node, a wait node without
   * `timeoutMs`, and one whose upstream nodes have not all completed.
   */
  waitDeadline: Date | null;
  /**
   * The node's direct upstream nodes, sorted by name. Derived from the stored DAG in the step
   * rows `getRun` reads anyway (each row's downstream nodes, inverted), so it costs no query.
   */
  after: string[];
}

/** A run with its steps. */
export interface RunInfo {
  runId: string;
  workflow: string;
  state: RunState;
  input: Json;
  submitKey: string | null;
  createdAt: Date;
  updatedAt: Date;
  /** When the run reached a terminal state (completed, failed, cancelled); null while running. */
  completedAt: Date | null;
  /** Steps in the order the workflow defines them (topological), then by name. */
  steps: StepInfo[];
}

/** A run without its steps, as `listRuns` returns it. */
export type RunSummary = Omit<RunInfo, 'steps' | 'input'> & {
  stepsRemaining: number;
};

/** Options of `submit`/`submitOnce`. */
export interface SubmitOptions {
  /**
   * Submit inside the caller's transaction (transactional enqueue): the run exists only if that
   * transaction commits. Anything with pg's `query` (a `PoolClient` after BEGIN, a `Tx`).
   */
  tx?: Tx;
  /**
   * Start the run at this time (PostgreSQL's clock decides when it has come): its root nodes are
   * `scheduled` until then. A time in the past starts it at once. Not with `delayMs`.
   */
  runAt?: Date;
  /**
   * Start the run this many ms after the submit (measured by PostgreSQL's clock from the insert):
   * 0 to `MAX_DELAY_MS`. Not with `runAt`.
   */
  delayMs?: number;
  /**
   * `submit` only: submits with one key inside the window make one run, started `delayMs` after
   * the last of them (at most `maxDelayMs` after the first), with the last committed input. Not
   * with `runAt` or `delayMs`; `submitOnce` and `submitMany` refuse it.
   */
  debounce?: DebounceOptions;
  /**
   * The run's priority, carried by every step of it: an integer from `MIN_PRIORITY` (-1000) to
   * `MAX_PRIORITY` (1000); among claimable steps a claim takes higher priority first, then earlier
   * `scheduledAt`. Default 0.
   */
  priority?: number;
}

/** Lowest priority of a run (`SubmitOptions.priority`). */
export const MIN_PRIORITY = -1000;
/** Highest priority of a run (`SubmitOptions.priority`). */
export const MAX_PRIORITY = 1000;

/** One limit of one action (and key) as `Client.listLimits` reports it. */
export interface LimitInfo {
  action: string;
  /** `concurrency` or `rate`. */
  kind: 'concurrency' | 'rate';
  /** Whether the limit has a key (counts each key's steps apart). */
  keyed: boolean;
  /**
   * The key, one row per key with running or waiting steps, for a limit with a key; null for the
   * action's limit without a key (which counts every step of the action), and for a limit with a
   * key when no key is in use (its one row then has `held` and `waiting` 0).
   */
  key: string | null;
  limit: number;
  /** A rate limit's period, ms; null for a concurrency limit. */
  periodMs: number | null;
  /**
   * Concurrency: steps holding a slot now (running). Rate: starts in the window that ends now.
   */
  held: number;
  /** Steps due and waiting to start (of this key), counted up to `LIST_LIMITS_CAP`. */
  waiting: number;
}

/** The window of a debounced submit; durations in ms, 0 to `MAX_DELAY_MS`. */
export interface DebounceOptions {
  /** The runs of one workflow debounce per key; the rules of a submit key apply. */
  key: string;
  /** The run starts this long after the last submit of its key (PostgreSQL's clock). */
  delayMs: number;
  /**
   * However many submits come, the run starts at most this long after it was created (its
   * `createdAt`); at least `delayMs`. Default: no cap.
   */
  maxDelayMs?: number;
}

/** Result of `submit`. */
export interface SubmitResult {
  runId: string;
}

/**
 * Result of a debounced `submit`: the run that absorbed this submit; `debounced` is true when it
 * joined a run an earlier submit created, false when this submit created it.
 */
export interface DebouncedSubmitResult extends SubmitResult {
  debounced: boolean;
}

/** Result of `submitOnce`: `created` is false when the key already had a run. */
export interface SubmitOnceResult {
  runId: string;
  created: boolean;
}

/** Result of `submitMany`: the new runs' ids, in the order of the inputs. */
export interface SubmitManyResult {
  runIds: string[];
}
