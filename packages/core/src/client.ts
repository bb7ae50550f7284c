/**
 * `Client`: submission, inspection and operator actions (API.md § @cyclone/core). Every
 * transaction touches the rows of one run (ARCHITECTURE.md § Data model).
 */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import type { Json, Tx, Workflow } from './definitions.js';
import {
  ConfigError,
  InputValidationError,
  InvalidStateError,
  NodeNotFoundError,
  PayloadError,
  RunNotFoundError,
  SubmitKeyConflictError,
  type ValidationIssue,
  WaitTimeoutError,
} from './errors.js';
import { DEFAULT_MAX_PAYLOAD_BYTES, encodePayload, hashJson, isStorableText } from './json.js';
import { type Logger, silentLogger } from './logger.js';
import { migrateCore } from './migrate.js';
import { CONNECT_TIMEOUT_MS, withConnection } from './pg-util.js';
import { DEFAULT_SCHEMA, quoteSchema } from './schema.js';
import * as sql from './sql.js';

/** Run states (API.md). */
export type RunState = 'running' | 'completed' | 'failed' | 'cancelled';
/** Step states (API.md). */
export type StepState =
  | 'pending'
  | 'available'
  | 'running'
  | 'retryable'
  | 'completed'
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
   * worker's stop grace period ran out; retried at once, and it counts as an attempt).
   */
  kind: string;
  stack?: string;
}

/** A node of a run as stored (API.md § StepInfo). */
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
  scheduledAt: Date;
  leaseOwner: string | null;
  leaseExpiresAt: Date | null;
  startedAt: Date | null;
  completedAt: Date | null;
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

/** Filters of `listRuns`. */
export interface ListRunsOptions {
  state?: RunState;
  workflow?: string;
  /** Most runs returned, newest first. Default 50, at most 1,000. */
  limit?: number;
}

const MAX_KEY_BYTES = 4096;

/** The most characters of an error message / stack stored per failed attempt. */
export const MAX_ERROR_MESSAGE_CHARS = 2000;
export const MAX_ERROR_STACK_CHARS = 4000;

/**
 * The entry point for everything but running handlers: migrate, submit, inspect, retry, cancel.
 * Safe to share across a process; it holds a pg pool.
 */
export class Client {
  /** The pool statements run on. */
  readonly pool: pg.Pool;
  /** The schema name (unquoted, validated). */
  readonly schema: string;
  /** The schema name quoted for SQL. */
  readonly q: string;
  /** Largest stored payload in bytes. */
  readonly maxPayloadBytes: number;
  readonly logger: Logger;
  /** The NOTIFY channel workers listen on. */
  readonly channel: string;
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
    this.q = quoteSchema(this.schema);
    this.channel = sql.channel(this.schema);
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

  private async insert<RI>(
    workflow: Workflow<RI>,
    input: RI,
    key: string | null,
    tx: Tx | undefined,
  ): Promise<SubmitOnceResult> {
    const value = this.validateRunInput(workflow, input);
    const { text } = wrapPayload(workflow.name, () =>
      encodePayload(value, this.maxPayloadBytes, 'the run input'),
    );
    const hash = hashJson(JSON.parse(text) as Json);
    const nodes = workflow.nodes;
    const runId = randomUUID();
    const db: Tx = tx ?? this.pool;
    for (let i = 0; i < 5; i++) {
      const { rows } = await db.query<{ id: string }>(sql.insertRun(this.q), [
        runId,
        workflow.name,
        text,
        key,
        hash,
        nodes.length,
        nodes.filter((n) => n.after.length === 0).length,
        nodes.map((n) => n.name),
        nodes.map((n) => n.action.name),
        nodes.map((n) => n.maxAttempts),
        nodes.map((n) => n.after.length),
        nodes.map((n) => JSON.stringify(n.downstream)),
        nodes.map((n) => JSON.stringify(n.ancestors)),
        this.channel,
      ]);
      if (rows[0]) return { runId: rows[0].id, created: true };
      // The key has a run (committed: ON CONFLICT waited for it).
      const found = await db.query<{ id: string; input_hash: string }>(sql.findByKey(this.q), [
        workflow.name,
        key,
      ]);
      const existing = found.rows[0];
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
    const runs = await this.pool.query(`SELECT * FROM ${this.q}.cyclone_runs WHERE id = $1`, [
      runId,
    ]);
    const r = runs.rows[0];
    if (!r) throw new RunNotFoundError(runId);
    const steps = await this.pool.query(
      `SELECT * FROM ${this.q}.cyclone_steps WHERE run_id = $1
       ORDER BY cardinality(ancestors), node`,
      [runId],
    );
    return { ...toSummary(r), input: r.input, steps: steps.rows.map(toStep) };
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
    const { rows } = await this.pool.query(
      `SELECT id, workflow, state, submit_key, steps_remaining, created_at, updated_at, completed_at
       FROM ${this.q}.cyclone_runs
       WHERE ($1::text IS NULL OR state = $1) AND ($2::text IS NULL OR workflow = $2)
       ORDER BY created_at DESC, id LIMIT $3`,
      [options.state ?? null, options.workflow ?? null, limit],
    );
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
        const s = await c.query<{ state: string }>(
          `SELECT state FROM ${this.q}.cyclone_steps WHERE run_id = $1 AND node = $2 FOR UPDATE`,
          [runId, node],
        );
        const step = s.rows[0];
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
      const { rows } = await c.query<{ node: string; state: string }>(
        `UPDATE ${this.q}.cyclone_steps t
         SET state = CASE WHEN t.deps_remaining = 0 THEN 'available' ELSE 'pending' END,
             max_attempts = CASE WHEN t.attempt >= t.max_attempts
                                 THEN t.attempt + t.max_attempts ELSE t.max_attempts END,
             reopened_after_attempt = t.attempt, scheduled_at = now(), updated_at = now()
         WHERE t.run_id = $1 AND ($2::text IS NULL OR t.node = $2)
           AND t.state IN ('discarded', 'cancelled')
         RETURNING t.node, t.state`,
        [runId, node ?? null],
      );
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
      await c.query(
        `UPDATE ${this.q}.cyclone_runs SET state = 'running', completed_at = NULL,
           steps_active = steps_active + $2, updated_at = now() WHERE id = $1`,
        [runId, activated],
      );
      await c.query('SELECT pg_notify($1, $2)', [this.channel, run.workflow]);
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
      await c.query(
        `UPDATE ${this.q}.cyclone_steps SET state = 'cancelled', lease_owner = NULL,
           lease_expires_at = NULL, updated_at = now()
         WHERE run_id = $1 AND state IN ('pending', 'available', 'running', 'retryable')`,
        [runId],
      );
      await c.query(
        `UPDATE ${this.q}.cyclone_runs SET state = 'cancelled', steps_active = 0,
           completed_at = now(), updated_at = now() WHERE id = $1`,
        [runId],
      );
    });
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
        return await withConnection(this.pool, async (c) => {
          try {
            await c.query('BEGIN');
            const r = await c.query(
              `SELECT state, steps_active, workflow FROM ${this.q}.cyclone_runs WHERE id = $1 FOR UPDATE`,
              [runId],
            );
            if (!r.rows[0]) throw new RunNotFoundError(runId);
            const out = await fn(c, r.rows[0]);
            await c.query('COMMIT');
            return out;
          } catch (err) {
            await c.query('ROLLBACK').catch(() => {});
            throw err;
          }
        });
      } catch (err) {
        const code = (err as { code?: string }).code;
        if ((code === '40P01' || code === '40001') && attempt < 5) continue;
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
