/**
 * The typed errors of `@cyclone/core`. Every error carries a stable `code` and the data a caller
 * needs, so callers branch on `code` or `isInstance`, never on message text.
 *
 * An application can end up with two installed copies of `@cyclone/core` (a peer-dependency
 * mismatch); `instanceof` then fails across them. Every error therefore carries markers
 * registered with `Symbol.for` (one per class in its chain), which both copies read alike:
 * `NonRetryableError.isInstance(err)` is true for a NonRetryableError of either copy, and the
 * worker decides retries by the `retryable` flag, never by `instanceof`.
 */

/** The stable codes of core's errors; sibling packages add their own (`string`). */
export type CycloneErrorCode =
  | 'WORKFLOW_DEFINITION'
  | 'INPUT_VALIDATION'
  | 'PAYLOAD'
  | 'SUBMIT_KEY_CONFLICT'
  | 'TRANSACTION_CONFLICT'
  | 'RUN_NOT_FOUND'
  | 'NODE_NOT_FOUND'
  | 'INVALID_STATE'
  | 'LEASE_LOST'
  | 'STEP_TIMEOUT'
  | 'WAIT_TIMEOUT'
  | 'CONFIG'
  | 'NON_RETRYABLE'
  | 'SNOOZE'
  | 'INVALID_SIGNAL'
  | 'SCHEDULE_NOT_FOUND'
  | 'LIMIT_KEY';

/** The marker of class `name`, shared by every copy of the package. */
const markerOf = (name: string) => Symbol.for(`cyclone.error.${name}`);

/** Base class of every error Cyclone throws on purpose. `code` is stable across releases. */
export class CycloneError extends Error {
  /** Stable machine-readable code, e.g. `RUN_NOT_FOUND`. */
  readonly code: CycloneErrorCode | (string & {});
  /**
   * Whether a step whose handler threw this error may be tried again: false for
   * `NonRetryableError` and its subclasses (the step is discarded at once), true otherwise.
   */
  readonly retryable: boolean;

  constructor(
    code: CycloneErrorCode | (string & {}),
    message: string,
    options?: { cause?: unknown; retryable?: boolean },
  ) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.code = code;
    this.retryable = options?.retryable ?? true;
    // One marker per class of the chain, so `X.isInstance` holds for subclasses too.
    for (
      let proto: object | null = new.target.prototype;
      proto && proto !== Error.prototype;
      proto = Object.getPrototypeOf(proto)
    ) {
      const name = (proto as { constructor: { name: string } }).constructor.name;
      Object.defineProperty(this, markerOf(name), { value: true, enumerable: false });
    }
  }

  /**
   * True when `err` is an instance of this class (or a subclass) from any installed copy of the
   * package: `LeaseLostError.isInstance(err)`. Recognised by the class name's `Symbol.for`
   * marker, so a bundler that renames classes breaks it only where it renames them differently.
   */
  static isInstance<T extends CycloneError>(
    this: abstract new (
      ...args: never[]
    ) => T,
    err: unknown,
  ): err is T {
    const marker = markerOf(
      // biome-ignore lint/complexity/noThisInStatic: the class it is called on, so each subclass checks its own marker
      this.name,
    );
    return (
      typeof err === 'object' && err !== null && (err as Record<symbol, unknown>)[marker] === true
    );
  }
}

/**
 * True when a handler's error asks for no further attempt: a `CycloneError` (from any copy of the
 * package) whose `retryable` flag is false, such as `NonRetryableError`.
 */
export function isNonRetryable(err: unknown): boolean {
  return CycloneError.isInstance(err) && err.retryable === false;
}

/**
 * A workflow or action definition is invalid: a cycle, an unknown dependency, a duplicate or
 * badly named node, an empty workflow, a bad option. Thrown by `newWorkflow`/`newAction` at
 * definition time, before anything touches the database.
 */
export class WorkflowDefinitionError extends CycloneError {
  /** The workflow (or action) name the definition was for. */
  readonly workflow: string;
  /** Whether `workflow` names a workflow or an action; the message starts with it. */
  readonly kind: 'workflow' | 'action';

  /**
   * @param workflow the name of the workflow or action being defined.
   * @param message what is wrong.
   * @param kind what `workflow` names (default 'workflow'), so an action's error says `action 'x'`.
   */
  constructor(workflow: string, message: string, kind: 'workflow' | 'action' = 'workflow') {
    super('WORKFLOW_DEFINITION', `${kind} '${workflow}': ${message}`);
    this.workflow = workflow;
    this.kind = kind;
  }
}

/** One problem found by a zod schema (the shape of zod's own issues, reduced to what we keep). */
export interface ValidationIssue {
  path: (string | number)[];
  message: string;
  code?: string;
}

/**
 * An input failed its zod schema (the workflow's at submit, or an action's once mapped), or is
 * not storable as JSON (a function, a BigInt, NaN, a cycle, a NUL character, over the size
 * limit). On submit nothing is written.
 */
export class InputValidationError extends CycloneError {
  /** The zod issues (or a single synthetic issue for a payload that is not JSON). */
  readonly issues: ValidationIssue[];
  /** The workflow whose input failed. */
  readonly workflow: string;
  /** The node whose action input failed, when the failure is a node's. */
  readonly node: string | undefined;
  /** `submitMany`: the position of the failing input in the array; undefined for one input. */
  readonly index: number | undefined;

  constructor(workflow: string, issues: ValidationIssue[], node?: string, index?: number) {
    const where = node ? `node '${node}' of workflow '${workflow}'` : `workflow '${workflow}'`;
    const first = issues[0];
    const summary = first
      ? `${first.path.length ? `${first.path.join('.')}: ` : ''}${first.message}`
      : 'invalid input';
    super(
      'INPUT_VALIDATION',
      `invalid input${index === undefined ? '' : ` at index ${index}`} for ${where}: ${summary}${issues.length > 1 ? ` (+${issues.length - 1} more)` : ''}`,
    );
    this.issues = issues;
    this.workflow = workflow;
    this.node = node;
    this.index = index;
  }
}

/**
 * A value to be stored (an input or a step output) cannot be stored as JSON without losing data,
 * or is larger than the configured limit. `path` points into the value (`$.a[2].b`).
 */
export class PayloadError extends CycloneError {
  /** JSONPath-like location of the offending value, `$` for the root. */
  readonly path: string;

  constructor(message: string, path: string) {
    super('PAYLOAD', `${message} at ${path}`);
    this.path = path;
  }
}

/**
 * `submitOnce` found a run with the same workflow and key but a different input. A dedupe key
 * never swallows a different logical submission.
 */
export class SubmitKeyConflictError extends CycloneError {
  readonly workflow: string;
  readonly key: string;
  /** The run that already holds the key. */
  readonly runId: string;

  constructor(workflow: string, key: string, runId: string) {
    super(
      'SUBMIT_KEY_CONFLICT',
      `workflow '${workflow}' already has run ${runId} for this key with a different input`,
    );
    this.workflow = workflow;
    this.key = key;
    this.runId = runId;
  }
}

/**
 * A submit in the caller's transaction (`{ tx }`) lost a race with a concurrent transaction:
 * under REPEATABLE READ or SERIALIZABLE, another transaction committed a run with the same submit
 * key after this one took its snapshot, so the key's run can be neither inserted nor read here
 * (PostgreSQL's serialization failure, SQLSTATE 40001; or a deadlock, 40P01). The transaction is
 * aborted: roll it back and run it again from the start; the retry finds the other run
 * (`created: false`).
 */
export class TransactionConflictError extends CycloneError {
  readonly workflow: string;
  /** The submit key, when the submit had one. */
  readonly key: string | undefined;
  /** PostgreSQL's SQLSTATE: `40001` (serialization failure) or `40P01` (deadlock). */
  readonly sqlState: string;

  constructor(workflow: string, key: string | undefined, sqlState: string, cause: unknown) {
    super(
      'TRANSACTION_CONFLICT',
      `workflow '${workflow}': your transaction lost a race with ${key === undefined ? 'a concurrent one' : 'a concurrent one submitting the same key'} (${sqlState === '40P01' ? 'deadlock' : 'serialization failure'}, SQLSTATE ${sqlState}); roll it back and retry the transaction`,
      { cause },
    );
    this.workflow = workflow;
    this.key = key;
    this.sqlState = sqlState;
  }
}

/** No run with this id exists (in this schema). */
export class RunNotFoundError extends CycloneError {
  readonly runId: string;

  constructor(runId: string) {
    super('RUN_NOT_FOUND', `run ${runId} not found`);
    this.runId = runId;
  }
}

/** No cron schedule of this name has been carried by a worker (in this schema). */
export class ScheduleNotFoundError extends CycloneError {
  readonly schedule: string;

  constructor(schedule: string) {
    super('SCHEDULE_NOT_FOUND', `schedule '${schedule}' not found`);
    this.schedule = schedule;
  }
}

/** A signal that cannot be sent: a bad name, or a payload that is not storable JSON. */
export class InvalidSignalError extends CycloneError {
  readonly runId: string;
  readonly signal: string;

  constructor(runId: string, signal: string, reason: string) {
    super(
      'INVALID_SIGNAL',
      `signal ${JSON.stringify(signal.slice(0, 80))} for run ${runId}: ${reason}`,
    );
    this.runId = runId;
    this.signal = signal;
  }
}

/** The run exists but has no node of this name. */
export class NodeNotFoundError extends CycloneError {
  readonly runId: string;
  readonly node: string;

  constructor(runId: string, node: string) {
    super('NODE_NOT_FOUND', `run ${runId} has no node '${node}'`);
    this.runId = runId;
    this.node = node;
  }
}

/**
 * An operator action does not apply to the current state: `retry` of a node that is not
 * `discarded`/`cancelled`, `cancel` of a finished run.
 */
export class InvalidStateError extends CycloneError {
  readonly runId: string;
  readonly node: string | undefined;
  /** The state found. */
  readonly state: string;

  constructor(runId: string, node: string | undefined, state: string, message: string) {
    super('INVALID_STATE', message);
    this.runId = runId;
    this.node = node;
    this.state = state;
  }
}

/**
 * The step's lease was lost: another worker reclaimed it after the lease expired, a timeout
 * failed it, or the run was cancelled. Thrown by completion (the fenced update touched no row),
 * and the reason of `ctx.signal` when the heartbeat finds the lease gone. Everything written on
 * `ctx.completionTx()` is rolled back.
 */
export class LeaseLostError extends CycloneError {
  readonly runId: string;
  readonly node: string;
  /** The attempt (fencing token) whose lease was lost. */
  readonly attempt: number;

  constructor(runId: string, node: string, attempt: number) {
    super(
      'LEASE_LOST',
      `lease lost for run ${runId} node '${node}' attempt ${attempt}: the step was reclaimed, timed out or cancelled`,
    );
    this.runId = runId;
    this.node = node;
    this.attempt = attempt;
  }
}

/** The reason `ctx.signal` carries when an action's `timeout` (ms) elapsed. */
export class StepTimeoutError extends CycloneError {
  readonly timeoutMs: number;

  constructor(timeoutMs: number) {
    super('STEP_TIMEOUT', `step timed out after ${timeoutMs} ms`);
    this.timeoutMs = timeoutMs;
  }
}

/** `waitForRun` gave up: the run was not terminal within `timeoutMs`. */
export class WaitTimeoutError extends CycloneError {
  readonly runId: string;

  constructor(runId: string, timeoutMs: number) {
    super('WAIT_TIMEOUT', `run ${runId} did not finish within ${timeoutMs} ms`);
    this.runId = runId;
  }
}

/**
 * A client or worker option is invalid (e.g. a schema name that is not a plain identifier), or an
 * option of an operator call (`deleteFinishedRuns`: a negative or fractional age, a bad state).
 */
export class ConfigError extends CycloneError {
  constructor(message: string) {
    // Not retryable: the same configuration fails the same way on every attempt.
    super('CONFIG', message, { retryable: false });
  }
}

/**
 * Throw this from a handler to discard the step at once, without further attempts. The message
 * is recorded in the step's errors.
 */
export class NonRetryableError extends CycloneError {
  /**
   * @param code the stable code; subclasses in other packages give their own. Default
   *   `NON_RETRYABLE`.
   */
  constructor(message: string, options?: { cause?: unknown; code?: string }) {
    super(options?.code ?? 'NON_RETRYABLE', message, {
      retryable: false,
      ...(options?.cause === undefined ? {} : { cause: options.cause }),
    });
  }
}

/** zod issues reduced to `ValidationIssue`s. */
export function zodIssues(
  issues: readonly { path: readonly PropertyKey[]; message: string; code?: string }[],
): ValidationIssue[] {
  return issues.map((i) => ({
    path: i.path.map((p) => (typeof p === 'number' ? p : String(p))),
    message: i.message,
    code: i.code,
  }));
}

/**
 * The longest delay Cyclone accepts for a delayed run, a node timer or a snooze: 10 years of
 * 366 days, in ms. The time is kept in PostgreSQL (`scheduled_at`), never in a process timer.
 */
export const MAX_DELAY_MS = 10 * 366 * 86_400_000;

/**
 * Throw this from a handler to run the step again after `delayMs` without using an attempt and
 * without an entry in its errors (a snooze): the step waits in state `scheduled`, its
 * `StepInfo.snoozes` counts one more, and any worker claims it once the time (PostgreSQL's
 * clock) has come. A step that snoozes more than its action's `maxSnoozes` (default 1,000) is
 * discarded with a clear error. For "not yet" answers: a provider's `Retry-After`, a quiet period,
 * a resource that is not ready.
 */
export class SnoozeError extends CycloneError {
  /** How long to wait before the next attempt, ms. */
  readonly delayMs: number;

  /**
   * @param delayMs a finite number of ms, 0 to `MAX_DELAY_MS` (fractions are rounded up).
   * @throws ConfigError for a delay that is not a number, negative, not finite or over the maximum.
   */
  constructor(delayMs: number, message?: string) {
    if (
      typeof delayMs !== 'number' ||
      !Number.isFinite(delayMs) ||
      delayMs < 0 ||
      delayMs > MAX_DELAY_MS
    ) {
      throw new ConfigError(
        `SnoozeError needs a delay in ms from 0 to ${MAX_DELAY_MS} (10 years), got ${String(delayMs)}`,
      );
    }
    super('SNOOZE', message ?? `snoozed for ${Math.ceil(delayMs)} ms`);
    this.delayMs = Math.ceil(delayMs);
  }
}

/**
 * A step's limit key could not be computed: the action's `concurrency.key` or `rateLimit.key`
 * threw, or returned something other than a non-empty string of at most 1,024 UTF-8 bytes (or
 * null/undefined for "no key"). The step is discarded (its error kind `limit_key_invalid`), as
 * another attempt would compute the same key; the claim of every other step goes on.
 */
export class LimitKeyError extends CycloneError {
  /** Which key failed: `concurrency` or `rateLimit`. */
  readonly limit: 'concurrency' | 'rateLimit';

  constructor(limit: 'concurrency' | 'rateLimit', message: string, options?: { cause?: unknown }) {
    super('LIMIT_KEY', message, { retryable: false, ...options });
    this.limit = limit;
  }
}
