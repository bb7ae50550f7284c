/**
 * `Client`: submission, inspection and operator actions (API.md § @cyclone/core). Every
 * transaction touches the rows of one run (ARCHITECTURE.md § Data model).
 */

import pg from 'pg';
import { v7 as uuidv7 } from 'uuid';
import { CONNECT_TIMEOUT_MS, type Db, isTransactionConflict, withTransaction } from './db.js';
import type { Workflow } from './definitions.js';
import {
  ConfigError,
  InputValidationError,
  InvalidStateError,
  NodeNotFoundError,
  PayloadError,
  RunNotFoundError,
  SubmitKeyConflictError,
  WaitTimeoutError,
  zodIssues,
} from './errors.js';
import { DEFAULT_MAX_PAYLOAD_BYTES, encodePayload, hashJson, isStorableText } from './json.js';
import { type Logger, silentLogger } from './logger.js';
import { migrateCore } from './migrate.js';
import { channelOf, DEFAULT_SCHEMA, quoteSchema } from './schema.js';
import * as runsSql from './sql/runs.js';
import { findRunByKey, insertRun, insertRuns, type StepColumns } from './sql/submit.js';
import type { Json, RunInfo, RunState, RunSummary, StepInfo, Tx } from './types.js';

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
  /** Logger (pino-compatible). Default: silent. */
  logger?: Logger;
  /**
   * Send the engine's hot statements as named prepared statements, parsed once per connection
   * (issue 8). Default true. Set false behind a transaction-pooling proxy that cannot keep
   * prepared statements across transactions (PgBouncer before 1.21, or with
   * `max_prepared_statements = 0`).
   */
  preparedStatements?: boolean;
}

/**
 * A new run id: a UUIDv7 (RFC 9562: 48-bit Unix ms timestamp, then random bits), so runs
 * created together sit together in the primary-key indexes of runs, steps and the ledger. With
 * random (v4) ids, every completion touched a random leaf of indexes that outgrow the buffer
 * cache as history accumulates (issue 8, scenario 7: measured by bench/).
 */
function newRunId(): string {
  return uuidv7();
}

/** The per-node columns of `workflow`'s steps (`sql/submit.ts`), in the workflow's node order. */
function stepColumns<RI>(workflow: Workflow<RI>): StepColumns {
  const nodes = workflow.nodes;
  return {
    stepCount: nodes.length,
    rootCount: nodes.filter((n) => n.after.length === 0).length,
    nodes: nodes.map((n) => n.name),
    actions: nodes.map((n) => n.action.name),
    maxAttempts: nodes.map((n) => n.maxAttempts),
    deps: nodes.map((n) => n.after.length),
    downstream: nodes.map((n) => JSON.stringify(n.downstream)),
    ancestors: nodes.map((n) => JSON.stringify(n.ancestors)),
  };
}

/** Options of `submit`/`submitOnce`. */
export interface SubmitOptions {
  /**
   * Submit inside the caller's transaction (transactional enqueue): the run exists only if that
   * transaction commits. Anything with pg's `query` (a `PoolClient` after BEGIN, a `Tx`).
   */
  tx?: Tx;
}

/** Result of `submit`. */
export interface SubmitResult {
  runId: string;
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

/** Filters of `listRuns`. */
export interface ListRunsOptions {
  state?: RunState;
  workflow?: string;
  /** Most runs returned, newest first. Default 50, at most 1,000. */
  limit?: number;
}

/** A finished run state: what `deleteFinishedRuns` may delete. */
export type FinishedRunState = 'completed' | 'failed' | 'cancelled';

/** Options of `deleteFinishedRuns`. */
export interface DeleteFinishedRunsOptions {
  /**
   * Minimum age in ms of a finished run, counted from its `completed_at` (when it reached its
   * final state). An integer ≥ 0. Keep runs longer than a duplicate `submitOnce` can arrive:
   * once a run is deleted, its key makes a new run.
   */
  olderThanMs: number;
  /** Runs deleted per batch (one short transaction each). An integer from 1 to 100,000; default 1,000. */
  batchSize?: number;
  /** Stop after deleting this many runs (an integer ≥ 1). Default: no limit. */
  maxRuns?: number;
  /**
   * The run states to delete. Default `['completed', 'cancelled']`: failed runs are kept unless
   * asked for, since an operator may still retry them. A `running` run is never deleted.
   */
  states?: readonly FinishedRunState[];
  /** Only runs of this workflow. Default: every workflow. */
  workflow?: string;
}

/** Result of `deleteFinishedRuns`. */
export interface DeleteFinishedRunsResult {
  /** Runs deleted (their steps and ledger rows went with them). */
  deleted: number;
}

/** Every finished run state, and the ones `deleteFinishedRuns` deletes by default. */
export const FINISHED_RUN_STATES: readonly FinishedRunState[] = [
  'completed',
  'failed',
  'cancelled',
];
export const DEFAULT_DELETE_STATES: readonly FinishedRunState[] = ['completed', 'cancelled'];
/** The largest `deleteFinishedRuns` batch. */
const MAX_DELETE_BATCH = 100_000;
/** Ages above this (~317 years) delete the same runs and would overflow PostgreSQL's timestamps. */
const MAX_AGE_MS = 1e13;

const MAX_KEY_BYTES = 4096;

/**
 * `submitMany` sends at most this many runs per statement (issue 8: the peers' bulk calls take
 * 1,000 jobs), and at most `SUBMIT_MANY_CHUNK_BYTES` of input JSON (a chunk holds at least one
 * run), so a statement stays far below PostgreSQL's 1 GB limit on a message even with inputs
 * near `maxPayloadBytes`.
 */
const SUBMIT_MANY_CHUNK_RUNS = 1000;
const SUBMIT_MANY_CHUNK_BYTES = 16 * 1024 * 1024;

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
    this.logger = options.logger ?? silentLogger;
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
   * `available`, the rest `pending`).
   * @throws InputValidationError when the input fails the workflow's schema, a root node's
   *   mapped input fails its action's schema, or the input is not storable JSON; nothing is
   *   written.
   */
  async submit<RI>(
    workflow: Workflow<RI>,
    input: NoInfer<RI>,
    options: SubmitOptions = {},
  ): Promise<SubmitResult> {
    const { runId } = await this.insert(workflow, input, null, options.tx);
    return { runId };
  }

  /**
   * Submits at most one run per `(workflow, key)`: returns the existing run when the key has
   * one (`created: false`). Deduplicated by a unique index, never by an advisory lock
   * (ARCHITECTURE.md § Pitfalls).
   * @param key any non-empty string without NUL or lone UTF-16 surrogates, at most 4,096 bytes.
   * @throws SubmitKeyConflictError when the key's run has a different input;
   *   InputValidationError as `submit`.
   */
  async submitOnce<RI>(
    workflow: Workflow<RI>,
    key: string,
    input: NoInfer<RI>,
    options: SubmitOptions = {},
  ): Promise<SubmitOnceResult> {
    if (
      typeof key !== 'string' ||
      key.length === 0 ||
      // A lone surrogate would be stored as U+FFFD, so two different keys could collide.
      !isStorableText(key) ||
      Buffer.byteLength(key) > MAX_KEY_BYTES
    ) {
      throw new InputValidationError(workflow.name, [
        {
          path: ['key'],
          message: `submit key must be a non-empty string without NUL characters or lone surrogates, at most ${MAX_KEY_BYTES} bytes`,
        },
      ]);
    }
    return this.insert(workflow, input, key, options.tx);
  }

  /**
   * Submits one new run of `workflow` per input (bulk `submit`): every input is validated and
   * encoded first, as `submit` does, then the runs and their steps go in with one statement per
   * chunk of up to 1,000 runs (and 16 MiB of input JSON), each with one NOTIFY. All or nothing:
   * with no `tx` and several chunks, the chunks share one transaction on a pool connection; with
   * `tx`, they run on it and the runs exist only if it commits. An empty array writes nothing
   * and sends no query. One transaction holds many runs: a deliberate exception to the one-run
   * rule (ARCHITECTURE.md § Data model), like the completion batch; the rows are all new, so it
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
    workflow: Workflow<RI>,
    inputs: readonly NoInfer<RI>[],
    options: SubmitOptions = {},
  ): Promise<SubmitManyResult> {
    if (!Array.isArray(inputs)) {
      throw new InputValidationError(workflow.name, [
        { path: [], message: 'submitMany takes an array of run inputs' },
      ]);
    }
    const texts: string[] = [];
    const hashes: string[] = [];
    for (let i = 0; i < inputs.length; i++) {
      try {
        const { text, hash } = this.encodeRunInput(workflow, inputs[i] as RI);
        texts.push(text);
        hashes.push(hash);
      } catch (err) {
        if (err instanceof InputValidationError) {
          throw new InputValidationError(err.workflow, err.issues, err.node, i);
        }
        throw err;
      }
    }
    if (texts.length === 0) return { runIds: [] };

    const runIds = texts.map(() => newRunId());
    const steps = stepColumns(workflow);
    const chunks: { from: number; to: number }[] = [];
    let from = 0;
    let bytes = 0;
    for (let i = 0; i < texts.length; i++) {
      const size = Buffer.byteLength(texts[i] as string);
      if (
        i > from &&
        (i - from >= SUBMIT_MANY_CHUNK_RUNS || bytes + size > SUBMIT_MANY_CHUNK_BYTES)
      ) {
        chunks.push({ from, to: i });
        from = i;
        bytes = 0;
      }
      bytes += size;
    }
    chunks.push({ from, to: texts.length });
    const chunkOf = ({ from, to }: { from: number; to: number }) => ({
      runIds: runIds.slice(from, to),
      inputs: texts.slice(from, to),
      inputHashes: hashes.slice(from, to),
      workflow: workflow.name,
      steps,
    });

    const { tx } = options;
    if (tx) {
      // A caller's transaction gets plain text (Tx.query), as in `insert`.
      for (const chunk of chunks) await insertRuns(tx, this.db, chunkOf(chunk), true);
      return { runIds };
    }
    if (chunks.length === 1) {
      await insertRuns(this.pool, this.db, chunkOf({ from: 0, to: texts.length }));
    } else {
      await withTransaction(this.pool, async (c) => {
        for (const chunk of chunks) await insertRuns(c, this.db, chunkOf(chunk));
      });
    }
    return { runIds };
  }

  private async insert<RI>(
    workflow: Workflow<RI>,
    input: RI,
    key: string | null,
    tx: Tx | undefined,
  ): Promise<SubmitOnceResult> {
    const { text, hash } = this.encodeRunInput(workflow, input);
    const runId = newRunId();
    const db: Tx = tx ?? this.pool;
    for (let i = 0; i < 5; i++) {
      // Prepared on the client's own pool; a caller's transaction gets plain text (Tx.query).
      const rows = await insertRun(
        db,
        this.db,
        {
          runId,
          workflow: workflow.name,
          input: text,
          submitKey: key,
          inputHash: hash,
          steps: stepColumns(workflow),
        },
        tx !== undefined,
      );
      if (rows[0]) return { runId: rows[0].id, created: true };
      // The key has a run (committed: ON CONFLICT waited for it).
      const existing = await findRunByKey(db, this.db, { workflow: workflow.name, key });
      if (existing) {
        if (existing.input_hash !== hash)
          throw new SubmitKeyConflictError(workflow.name, key as string, existing.id);
        return { runId: existing.id, created: false };
      }
      // The conflicting run vanished between the statements (deleted by retention): try again.
    }
    throw new Error(`submitOnce(${workflow.name}): the key's run kept changing; try again`);
  }

  /** Validates and normalises a run input: the workflow schema, then roots' action schemas. */
  /**
   * A run input validated (validateRunInput), encoded as stored JSON text and hashed (the hash a
   * submit key's later submissions are compared with).
   * @throws InputValidationError as validateRunInput, or for a payload that is not storable JSON
   *   or is over `maxPayloadBytes`.
   */
  private encodeRunInput<RI>(workflow: Workflow<RI>, input: RI): { text: string; hash: string } {
    const value = this.validateRunInput(workflow, input);
    const { text } = wrapPayload(workflow.name, () =>
      encodePayload(value, this.maxPayloadBytes, 'the run input'),
    );
    return { text, hash: hashJson(JSON.parse(text) as Json) };
  }

  private validateRunInput<RI>(workflow: Workflow<RI>, input: RI): unknown {
    let value: unknown = input;
    if (workflow.inputSchema) {
      const r = workflow.inputSchema.safeParse(input);
      if (!r.success) throw new InputValidationError(workflow.name, zodIssues(r.error.issues));
      value = r.data;
    }
    for (const n of workflow.nodes) {
      if (n.after.length > 0 || !n.action.inputSchema) continue;
      let mapped: unknown;
      try {
        mapped = n.input ? n.input(value as RI, {}) : value;
      } catch (err) {
        throw new InputValidationError(
          workflow.name,
          [{ path: [], message: `input mapping threw: ${(err as Error)?.message ?? String(err)}` }],
          n.name,
        );
      }
      const r = n.action.inputSchema.safeParse(mapped);
      if (!r.success)
        throw new InputValidationError(workflow.name, zodIssues(r.error.issues), n.name);
    }
    return value;
  }

  /**
   * A run and its steps.
   * @throws RunNotFoundError when no run has this id (including a string that is not a uuid).
   */
  async getRun(runId: string): Promise<RunInfo> {
    if (!isUuid(runId)) throw new RunNotFoundError(String(runId));
    const r = await runsSql.selectRun(this.pool, this.db, runId);
    if (!r) throw new RunNotFoundError(runId);
    const steps = await runsSql.selectSteps(this.pool, this.db, runId);
    return { ...toSummary(r), input: r.input, steps: steps.map(toStep) };
  }

  /**
   * Runs, newest first, filtered by state and workflow. A `limit` that is not a finite number
   * counts as the default; a workflow name PostgreSQL cannot store (NUL, lone surrogates) matches
   * no run.
   */
  async listRuns(options: ListRunsOptions = {}): Promise<RunSummary[]> {
    const asked = Number(options.limit ?? 50);
    const limit = Math.min(Math.max(1, Math.trunc(Number.isFinite(asked) ? asked : 50)), 1000);
    if (options.workflow !== undefined && !isStorableText(String(options.workflow))) return [];
    const rows = await runsSql.listRuns(this.pool, this.db, {
      state: options.state ?? null,
      workflow: options.workflow ?? null,
      limit,
    });
    return rows.map((r) => ({ ...toSummary(r), stepsRemaining: r.steps_remaining }));
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
    const timeoutMs = options.timeoutMs ?? 60_000;
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const run = await this.getRun(runId);
      if (run.state !== 'running') return run;
      if (Date.now() >= deadline) throw new WaitTimeoutError(runId, timeoutMs);
      await new Promise((r) =>
        setTimeout(r, Math.min(options.pollMs ?? 100, Math.max(1, deadline - Date.now()))),
      );
    }
  }

  /**
   * Operator retry: reopens a `discarded` or `cancelled` node in place — same run, same node,
   * `attempt` keeps counting; when its attempts are exhausted, `max_attempts` is raised to
   * `attempt + max_attempts` (the same budget again). The run goes back to `running` (ARCHITECTURE.md § Operator retry).
   * @returns the nodes reopened.
   * @throws RunNotFoundError; NodeNotFoundError; InvalidStateError when the node is not
   *   discarded/cancelled, or when reopening it alone cannot progress (an upstream is not done).
   */
  async retry(runId: string, node: string): Promise<string[]> {
    return this.reopen(runId, node);
  }

  /**
   * `retry` for every discarded or cancelled node of the run, in one transaction.
   * @returns the nodes reopened (empty when there were none).
   * @throws RunNotFoundError.
   */
  async retryAll(runId: string): Promise<string[]> {
    return this.reopen(runId, undefined);
  }

  private async reopen(runId: string, node: string | undefined): Promise<string[]> {
    if (!isUuid(runId)) throw new RunNotFoundError(String(runId));
    return this.inRunTx(runId, async (c, run) => {
      if (node !== undefined) {
        // No node can have a name PostgreSQL cannot store (NUL, lone surrogates).
        if (typeof node !== 'string' || !isStorableText(node)) {
          throw new NodeNotFoundError(runId, String(node));
        }
        const step = await runsSql.lockStep(c, this.db, { runId, node });
        if (!step) throw new NodeNotFoundError(runId, node);
        if (step.state !== 'discarded' && step.state !== 'cancelled') {
          throw new InvalidStateError(
            runId,
            node,
            step.state,
            `node '${node}' of run ${runId} is ${step.state}; only a discarded or cancelled node can be retried`,
          );
        }
      }
      const rows = await runsSql.reopenSteps(c, this.db, { runId, node: node ?? null });
      if (rows.length === 0) return [];
      const activated = rows.filter((r) => r.state === 'available').length;
      if (run.steps_active + activated === 0) {
        throw new InvalidStateError(
          runId,
          node,
          run.state,
          `reopening ${node ? `node '${node}'` : 'these nodes'} cannot make progress: an upstream node is not done; retry it first or use retryAll`,
        );
      }
      await runsSql.reactivateRun(c, this.db, { runId, activated });
      await runsSql.notifyWorkflow(c, this.db, run.workflow);
      return rows.map((r) => r.node);
    });
  }

  /**
   * Cancels a run: every step not yet finished becomes `cancelled` (a running handler sees its
   * `ctx.signal` aborted at its next heartbeat and its completion is fenced out), the run
   * `cancelled`. Cancelling a cancelled run does nothing.
   * @throws RunNotFoundError; InvalidStateError when the run is completed.
   */
  async cancel(runId: string): Promise<void> {
    if (!isUuid(runId)) throw new RunNotFoundError(String(runId));
    await this.inRunTx(runId, async (c, run) => {
      if (run.state === 'cancelled') return;
      if (run.state === 'completed') {
        throw new InvalidStateError(
          runId,
          undefined,
          run.state,
          `run ${runId} is completed; it cannot be cancelled`,
        );
      }
      await runsSql.cancelRun(c, this.db, runId);
    });
  }

  /**
   * Retention (ARCHITECTURE.md § Pitfalls, bloat): deletes the runs in `states` (default
   * completed and cancelled; failed runs are kept unless asked for, as an operator may still
   * retry them) that finished more than `olderThanMs` ago, oldest first, in batches of
   * `batchSize`, each one short transaction that skips runs locked right now (an operator retry
   * in progress), until a batch comes back short or `maxRuns` runs are deleted. A `running` run
   * is never deleted. Each run's steps and @cyclone/idempotency ledger rows go with it
   * (`ON DELETE CASCADE`). Run it periodically (`cyclone cleanup` from cron, a scheduled job).
   * @returns the number of runs deleted.
   * @throws ConfigError for a bad option (a negative, fractional or non-finite number, an unknown
   *   or `running` state, a workflow that is not a string); nothing is deleted.
   */
  async deleteFinishedRuns(options: DeleteFinishedRunsOptions): Promise<DeleteFinishedRunsResult> {
    const o = validateDeleteOptions(options);
    // No workflow has a name PostgreSQL cannot store (NUL, lone surrogates).
    if (o.workflow !== null && !isStorableText(o.workflow)) return { deleted: 0 };
    let deleted = 0;
    for (;;) {
      const limit = Math.min(o.batchSize, o.maxRuns - deleted);
      if (limit <= 0) break;
      const n = await runsSql.deleteFinishedRuns(this.pool, this.db, {
        states: o.states,
        olderThanMs: o.olderThanMs,
        workflow: o.workflow,
        limit,
      });
      deleted += n;
      this.logger.debug({ deleted: n, total: deleted }, 'deleted a batch of finished runs');
      if (n < limit) break;
    }
    return { deleted };
  }

  /**
   * Runs `fn` in a transaction holding the run row's lock. Retries on deadlock or serialization
   * failure (SQLSTATE 40P01, 40001), up to 5 times.
   */
  private async inRunTx<T>(
    runId: string,
    fn: (
      c: pg.PoolClient,
      run: { state: string; steps_active: number; workflow: string },
    ) => Promise<T>,
  ): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await withTransaction(this.pool, async (c) => {
          const run = await runsSql.lockRun(c, this.db, runId);
          if (!run) throw new RunNotFoundError(runId);
          return await fn(c, run);
        });
      } catch (err) {
        if (isTransactionConflict(err) && attempt < 5) continue;
        throw err;
      }
    }
  }

  /** Closes the pool if the client created it. Idempotent. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.ownsPool) await this.pool.end();
  }
}

function wrapPayload<T>(workflow: string, fn: () => T): T {
  try {
    return fn();
  } catch (err) {
    if (err instanceof PayloadError) {
      throw new InputValidationError(workflow, [
        {
          path: err.path
            .replace(/^\$\.?/, '')
            .split('.')
            .filter(Boolean),
          message: err.message,
          code: 'payload',
        },
      ]);
    }
    throw err;
  }
}

/** `deleteFinishedRuns`'s options checked and defaulted. @throws ConfigError. */
function validateDeleteOptions(options: DeleteFinishedRunsOptions): {
  olderThanMs: number;
  batchSize: number;
  maxRuns: number;
  states: FinishedRunState[];
  workflow: string | null;
} {
  if (typeof options !== 'object' || options === null) {
    throw new ConfigError('deleteFinishedRuns needs an options object with olderThanMs');
  }
  const integer = (name: string, value: unknown, min: number, max: number): number => {
    if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < min || value > max) {
      const range = max === Number.MAX_SAFE_INTEGER ? `≥ ${min}` : `from ${min} to ${max}`;
      throw new ConfigError(
        `deleteFinishedRuns: ${name} must be an integer ${range}, got ${describeValue(value)}`,
      );
    }
    return value;
  };
  const olderThanMs = integer('olderThanMs', options.olderThanMs, 0, Number.MAX_SAFE_INTEGER);
  const batchSize = integer('batchSize', options.batchSize ?? 1000, 1, MAX_DELETE_BATCH);
  const maxRuns =
    options.maxRuns === undefined
      ? Number.POSITIVE_INFINITY
      : integer('maxRuns', options.maxRuns, 1, Number.MAX_SAFE_INTEGER);
  const states = options.states ?? DEFAULT_DELETE_STATES;
  if (
    !Array.isArray(states) ||
    states.length === 0 ||
    // Spread, so a hole in a sparse array counts as a bad state.
    [...states].some((s) => !FINISHED_RUN_STATES.includes(s))
  ) {
    throw new ConfigError(
      `deleteFinishedRuns: states must be a non-empty array of 'completed', 'failed' and 'cancelled' (a running run is never deleted), got ${describeValue(states)}`,
    );
  }
  if (options.workflow !== undefined && typeof options.workflow !== 'string') {
    throw new ConfigError(
      `deleteFinishedRuns: workflow must be a string, got ${describeValue(options.workflow)}`,
    );
  }
  return {
    olderThanMs: Math.min(olderThanMs, MAX_AGE_MS),
    batchSize,
    maxRuns,
    states: [...new Set(states)],
    workflow: options.workflow ?? null,
  };
}

/** A short, safe rendering of a bad option value for an error message. */
function describeValue(v: unknown): string {
  if (typeof v === 'string') return JSON.stringify(v.length > 40 ? `${v.slice(0, 40)}…` : v);
  if (typeof v === 'number' || typeof v === 'boolean' || v === null || v === undefined)
    return String(v);
  if (Array.isArray(v)) {
    const shown = [...v.slice(0, 5)].map((e) =>
      typeof e === 'object' && e !== null ? typeof e : describeValue(e),
    );
    return `[${shown.join(', ')}${v.length > 5 ? ', …' : ''}]`;
  }
  return typeof v;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
function isUuid(s: unknown): s is string {
  return typeof s === 'string' && UUID.test(s);
}

// biome-ignore lint/suspicious/noExplicitAny: rows from pg are untyped
function toSummary(r: any): Omit<RunInfo, 'steps' | 'input'> {
  return {
    runId: r.id,
    workflow: r.workflow,
    state: r.state,
    submitKey: r.submit_key,
    createdAt: r.created_at,
    updatedAt: r.updated_at,
    completedAt: r.completed_at,
  };
}

// biome-ignore lint/suspicious/noExplicitAny: rows from pg are untyped
function toStep(r: any): StepInfo {
  return {
    node: r.node,
    action: r.action,
    state: r.state,
    attempt: r.attempt,
    maxAttempts: r.max_attempts,
    depsRemaining: r.deps_remaining,
    reopenedAfterAttempt: r.reopened_after_attempt,
    output: r.output,
    errors: r.errors,
    scheduledAt: r.scheduled_at,
    leaseOwner: r.lease_owner,
    leaseExpiresAt: r.lease_expires_at,
    startedAt: r.started_at,
    completedAt: r.completed_at,
  };
}
