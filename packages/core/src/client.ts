/**
 * `Client`: its options, its pool and database handle, `migrate()` and `close()`, and one thin
 * method per operation, each delegating to `submit.ts`, `inspect.ts`, `operator.ts`,
 * `retention.ts` or `schedules.ts`. Every transaction but a `submitMany` batch touches the rows of one run, so
 * operations on different runs never wait on each other.
 */

import pg from 'pg';
import {
  CONNECT_TIMEOUT_MS,
  type Db,
  DEAD_CONNECTION_MS,
  deadConnectionSettings,
  ignoreLateErrors,
} from './db.js';
import { ConfigError } from './errors.js';
import type { ListRunsOptions } from './inspect.js';
import * as inspect from './inspect.js';
import { DEFAULT_MAX_PAYLOAD_BYTES } from './json.js';
import { type ListLimitsOptions, listLimits } from './list-limits.js';
import { type Logger, stderrLogger } from './logger.js';
import { migrateCore } from './migrate.js';
import * as operator from './operator.js';
import type { DeleteFinishedRunsOptions, DeleteFinishedRunsResult } from './retention.js';
import * as retention from './retention.js';
import type { ScheduleInfo, TriggerScheduleResult } from './schedules.js';
import * as schedules from './schedules.js';
import { channelOf, DEFAULT_SCHEMA, quoteSchema } from './schema.js';
import type { SignalOptions, SignalResult } from './signals.js';
import * as signals from './signals.js';
import type { SubmittableWorkflow } from './submit.js';
import * as submission from './submit.js';
import type {
  DebouncedSubmitResult,
  DebounceOptions,
  LimitInfo,
  RunInfo,
  RunSummary,
  SubmitManyResult,
  SubmitOnceResult,
  SubmitOptions,
  SubmitResult,
} from './types.js';
import type { WorkerInfo } from './workers.js';
import * as workers from './workers.js';

// The operations' option and result types, named where the public API has always found them.
export type { ListRunsOptions } from './inspect.js';
export type {
  DeleteFinishedRunsOptions,
  DeleteFinishedRunsResult,
  FinishedRunState,
} from './retention.js';
export type { ScheduleInfo, TriggerScheduleResult } from './schedules.js';
export type {
  DebouncedSubmitResult,
  DebounceOptions,
  SubmitManyResult,
  SubmitOnceResult,
  SubmitOptions,
  SubmitResult,
} from './types.js';
export type { WorkerInfo } from './workers.js';

/** Options of `Client`. Give `connectionString` or `pool`. */
export interface ClientOptions {
  /** A PostgreSQL URL; the client then owns a pool (`poolSize` connections) and closes it. */
  connectionString?: string | undefined;
  /** A pool of the caller's; `close()` leaves it open. */
  pool?: pg.Pool;
  /** Connections of an owned pool. Default 10. */
  poolSize?: number;
  /** Schema of Cyclone's tables. Default `cyclone`. @throws ConfigError when not an identifier. */
  schema?: string;
  /** Largest stored input or output, in bytes of JSON. Default 1 MiB. */
  maxPayloadBytes?: number;
  /**
   * Logger (pino-compatible), also the default of the client's workers. Default `stderrLogger()`:
   * warnings and errors on stderr, one line each (`CYCLONE_LOG` sets its level); `silentLogger`
   * for none.
   */
  logger?: Logger;
  /**
   * Send the engine's hot statements as named prepared statements, parsed once per connection
   * rather than on every call. Default true. Set false behind a transaction-pooling proxy that
   * cannot keep prepared statements across transactions (PgBouncer before 1.21, or with
   * `max_prepared_statements = 0`).
   */
  preparedStatements?: boolean;
}

/**
 * The entry point for everything but running handlers: migrate, submit, inspect, retry, cancel.
 * Safe to share across a process; it holds a pg pool.
 */
export class Client {
  /** The pool statements run on. */
  readonly pool: pg.Pool;
  /** The schema name (unquoted, validated). */
  readonly schema: string;
  /** Largest stored payload in bytes. */
  readonly maxPayloadBytes: number;
  readonly logger: Logger;
  /**
   * The engine's database handle (pool, quoted schema, NOTIFY channel, prepared-statement flag),
   * for workers and Cyclone's own packages; applications need not touch it.
   */
  readonly db: Db;
  /** Connection settings, for workers that open their own pool and LISTEN connection. */
  readonly connectionString: string | undefined;
  private readonly ownsPool: boolean;
  private closed = false;

  /**
   * @throws ConfigError for a bad schema name, or when neither `connectionString` nor `pool` is
   *   given.
   */
  constructor(options: ClientOptions) {
    this.schema = options.schema ?? DEFAULT_SCHEMA;
    this.maxPayloadBytes = options.maxPayloadBytes ?? DEFAULT_MAX_PAYLOAD_BYTES;
    this.logger = options.logger ?? stderrLogger();
    this.connectionString = options.connectionString;
    if (options.pool) {
      this.pool = options.pool;
      this.ownsPool = false;
    } else if (options.connectionString) {
      this.pool = new pg.Pool({
        connectionString: options.connectionString,
        max: options.poolSize ?? 10,
        connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
        keepAlive: true,
        // Without it the OS's idle time applies (2 hours on Linux) before a silent peer is probed.
        keepAliveInitialDelayMillis: deadConnectionSettings(DEAD_CONNECTION_MS).keepAliveIdleMs,
      });
      this.ownsPool = true;
    } else {
      throw new ConfigError(
        'Client needs a connectionString or a pool (is DATABASE_URL set? the embedded default is for the CLI and the demo: startEmbeddedPostgres() from @cyclone/core/embedded)',
      );
    }
    this.db = {
      pool: this.pool,
      schema: this.schema,
      q: quoteSchema(this.schema),
      channel: channelOf(this.schema),
      prepare: options.preparedStatements ?? true,
    };
    // An idle client whose connection dies emits 'error' on the pool; unhandled, it would crash
    // the process. The next query simply gets a new connection.
    this.pool.on('error', (err) => this.logger.warn({ err: err.message }, 'idle connection lost'));
    ignoreLateErrors(this.pool);
  }

  /**
   * Applies pending migrations of the core schema (advisory-locked; concurrent calls are safe).
   * @returns the names of the migrations applied now.
   */
  migrate(): Promise<string[]> {
    return migrateCore(this.pool, this.schema);
  }

  /**
   * Submits a new run of `workflow`: the run and all its steps in one transaction (roots
   * `available`, the rest `pending`). With `debounce`, joins the open run of its key when there
   * is one (`debounced: true`: its input replaced, its start pushed back) or creates it
   * (`debounced: false`); see docs/scheduling.md.
   * @throws InputValidationError when the input fails the workflow's schema, a root node's
   *   mapped input fails its action's schema, or the input is not storable JSON, or for bad
   *   `runAt`/`delayMs`/`debounce` options; nothing is written.
   */
  submit<RI>(
    workflow: SubmittableWorkflow<RI>,
    input: NoInfer<RI>,
    options: SubmitOptions & { debounce: DebounceOptions },
  ): Promise<DebouncedSubmitResult>;
  submit<RI>(
    workflow: SubmittableWorkflow<RI>,
    input: NoInfer<RI>,
    options?: SubmitOptions,
  ): Promise<SubmitResult>;
  async submit<RI>(
    workflow: SubmittableWorkflow<RI>,
    input: NoInfer<RI>,
    options: SubmitOptions = {},
  ): Promise<SubmitResult | DebouncedSubmitResult> {
    return submission.submit(this, workflow, input, options);
  }

  /**
   * Submits at most one run per `(workflow, key)`: returns the existing run when the key has
   * one (`created: false`). Deduplicated by a unique index, never by an advisory lock (a lock
   * holder that rolled back would lose the submission).
   * @param key any non-empty string without NUL or lone UTF-16 surrogates, at most 4,096 bytes.
   * @throws SubmitKeyConflictError when the key's run has a different input;
   *   InputValidationError as `submit`.
   */
  async submitOnce<RI>(
    workflow: SubmittableWorkflow<RI>,
    key: string,
    input: NoInfer<RI>,
    options: SubmitOptions = {},
  ): Promise<SubmitOnceResult> {
    return submission.submitOnce(this, workflow, key, input, options);
  }

  /**
   * Submits one new run of `workflow` per input (bulk `submit`): every input is validated and
   * encoded first, as `submit` does, then the runs and their steps go in with one statement per
   * chunk of up to 1,000 runs (and 16 MiB of input JSON), each with one NOTIFY. All or nothing:
   * with no `tx` and several chunks, the chunks share one transaction on a pool connection; with
   * `tx`, they run on it and the runs exist only if it commits. An empty array writes nothing
   * and sends no query. One transaction holds many runs: a deliberate exception to the rule that
   * a transaction touches one run's rows, like the completion batch; the rows are all new, so it
   * waits on no other transaction's run.
   *
   * Not idempotent: there is no submit key, so calling it again (say, after a timeout whose
   * outcome you do not know) makes a second set of runs. Use `submitOnce` per input when a retry
   * must not duplicate.
   * @param inputs the runs' inputs; `runIds[i]` is the run of `inputs[i]`.
   * @returns the new runs' ids, in the order of `inputs`.
   * @throws InputValidationError for the first input that fails, as `submit` (the workflow's
   *   schema, a root's mapped input, or a payload that is not storable JSON or is over
   *   `maxPayloadBytes`), with `index` set to its position and named in the message; nothing is
   *   written.
   */
  async submitMany<RI>(
    workflow: SubmittableWorkflow<RI>,
    inputs: readonly NoInfer<RI>[],
    options: SubmitOptions = {},
  ): Promise<SubmitManyResult> {
    return submission.submitMany(this, workflow, inputs, options);
  }

  /**
   * A run and its steps.
   * @throws RunNotFoundError when no run has this id (including a string that is not a uuid).
   */
  async getRun(runId: string): Promise<RunInfo> {
    return inspect.getRun(this.db, runId);
  }

  /**
   * Runs, newest first, filtered by state and workflow. A `limit` that is not a finite number
   * counts as the default; a workflow name PostgreSQL cannot store (NUL, lone surrogates) matches
   * no run.
   */
  async listRuns(options: ListRunsOptions = {}): Promise<RunSummary[]> {
    return inspect.listRuns(this.db, options);
  }

  /**
   * Resolves with the run once it is terminal (`completed`, `failed`, `cancelled`), polling
   * every `pollMs` (default 100 ms).
   * @throws WaitTimeoutError after `timeoutMs` (default 60,000 ms); RunNotFoundError.
   */
  async waitForRun(
    runId: string,
    options: { timeoutMs?: number; pollMs?: number } = {},
  ): Promise<RunInfo> {
    return inspect.waitForRun(this.db, runId, options);
  }

  /**
   * Operator retry: reopens a `discarded` or `cancelled` node in place — same run, same node,
   * `attempt` keeps counting, so `(runId, node)` idempotency keys keep deduplicating; when its
   * attempts are exhausted, `max_attempts` is raised to `attempt + max_attempts` (the same budget
   * again). The run goes back to `running`.
   * @returns the nodes reopened.
   * @throws RunNotFoundError; NodeNotFoundError; InvalidStateError when the node is not
   *   discarded/cancelled, or when reopening it alone cannot progress (an upstream is not done).
   */
  async retry(runId: string, node: string): Promise<string[]> {
    return operator.retry(this.db, runId, node);
  }

  /**
   * `retry` for every discarded or cancelled node of the run, in one transaction.
   * @returns the nodes reopened (empty when there were none).
   * @throws RunNotFoundError.
   */
  async retryAll(runId: string): Promise<string[]> {
    return operator.retryAll(this.db, runId);
  }

  /**
   * Cancels a run: every step not yet finished becomes `cancelled` (a running handler sees its
   * `ctx.signal` aborted at its next heartbeat and its completion is fenced out), the run
   * `cancelled`. Cancelling a cancelled run does nothing.
   * @throws RunNotFoundError; InvalidStateError when the run is completed.
   */
  async cancel(runId: string): Promise<void> {
    return operator.cancel(this.db, runId);
  }

  /**
   * Retention, so finished history does not bloat the hot tables: deletes the runs in `states`
   * (default completed and cancelled; failed runs are kept unless asked for, as an operator may
   * still retry them) that finished more than `olderThanMs` ago, oldest first, in batches of
   * `batchSize`, each one short transaction that skips runs locked right now (an operator retry
   * in progress), until a batch comes back short or `maxRuns` runs are deleted. A `running` run
   * is never deleted. Each run's steps and @cyclone/idempotency ledger rows go with it
   * (`ON DELETE CASCADE`). Run it periodically (`cyclone cleanup` from cron, a scheduled job).
   * @returns the number of runs deleted.
   * @throws ConfigError for a bad option (a negative, fractional or non-finite number, an unknown
   *   or `running` state, a workflow that is not a string); nothing is deleted.
   */
  async deleteFinishedRuns(options: DeleteFinishedRunsOptions): Promise<DeleteFinishedRunsResult> {
    return retention.deleteFinishedRuns(this.db, this.logger, options);
  }

  /**
   * The cron schedules workers have carried, by name, each with `carried` (a worker carrying it
   * was seen within the last minute; an uncarried schedule does not fire), `paused`, the last
   * fire time dealt with and the next one.
   */
  async listSchedules(): Promise<ScheduleInfo[]> {
    return schedules.listSchedules(this.db);
  }

  /**
   * Pauses a schedule: no fire time fires until `resumeSchedule` (kept in the database, so it
   * holds across restarts). Pausing a paused schedule does nothing.
   * @throws ScheduleNotFoundError when no worker has carried a schedule of this name.
   */
  async pauseSchedule(name: string): Promise<void> {
    return schedules.pauseSchedule(this.db, name);
  }

  /**
   * Resumes a paused schedule: it fires again from the next fire time on; the fire times that
   * passed while it was paused never fire. Resuming an active schedule does nothing.
   * @throws ScheduleNotFoundError when no worker has carried a schedule of this name.
   */
  async resumeSchedule(name: string): Promise<void> {
    return schedules.resumeSchedule(this.db, name);
  }

  /**
   * Asks for one run of the schedule now, outside its cron (paused or not): a worker carrying the
   * schedule makes it, exactly once, with the request's time as `fireAt` (its submit key is
   * `schedule:<name>:trigger:<that time>`). Requests made before a worker takes the first one
   * make one run. With no worker carrying it (`carried: false`), the run is made once one does.
   * @throws ScheduleNotFoundError when no worker has carried a schedule of this name.
   */
  async triggerSchedule(name: string): Promise<TriggerScheduleResult> {
    return schedules.triggerSchedule(this.db, name);
  }

  /**
   * Sends signal `name` to run `runId` with `payload` (JSON, within `maxPayloadBytes`). Stored
   * durably whatever the run's progress: a wait node of that name completes with the payload as
   * its output, now if it is waiting, or when it is reached. The first signal of a name per run
   * stands; a later one is `accepted: false` and changes nothing. `waitingNodes` names the
   * run's wait nodes of that name not yet finished (empty: none waits for it, a misspelt name
   * perhaps; it is stored anyway). With `{ tx }`, inside the caller's transaction.
   * @throws InvalidSignalError (a bad name or payload), RunNotFoundError, InvalidStateError (the
   *   run is finished); nothing is written then.
   */
  signal(
    runId: string,
    name: string,
    payload?: unknown,
    options: SignalOptions = {},
  ): Promise<SignalResult> {
    return signals.signal(this, runId, name, payload, options);
  }

  /**
   * The workers registered in the database, most recently started first: each Worker registers
   * itself at start, refreshes its row every 5 s (steps in flight, last seen) and removes it at a
   * graceful stop. `alive` is false for a worker not seen for 15 s; a dead worker's row is
   * deleted by the other workers about a minute after its last refresh.
   */
  async listWorkers(): Promise<WorkerInfo[]> {
    return workers.listWorkers(this.db);
  }

  /**
   * The concurrency and rate limits of the limited actions and their use (docs/flow-control.md):
   * `[{ action, kind, key, limit, periodMs, held, waiting }]`, one row per limit without a key
   * and one per key in use for a limit with a key. `held`: running steps (concurrency) or starts
   * in the window ending now (rate); `waiting`: due steps not started, counted up to
   * `LIST_LIMITS_CAP`. The limits are those of `options.workflows` when given, else those the
   * workers recorded when they started (a process without the definitions, such as the CLI).
   */
  async listLimits(options: ListLimitsOptions = {}): Promise<LimitInfo[]> {
    return listLimits(this.db, options.workflows);
  }

  /** Closes the pool if the client created it. Idempotent. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.ownsPool) await this.pool.end();
  }
}
