/**
 * One claimed step, from handler to recorded outcome: input mapping and validation, the handler
 * raced against its timeout and lease, the fenced completion (on the handler's `completionTx`
 * if it opened one) or the fenced failure with backoff (ARCHITECTURE.md § The step lifecycle,
 * 3–5 and 7).
 */
import type pg from 'pg';
import type { Client } from './client.js';
import type { CompletionBatcher } from './completion-batcher.js';
import { isConnectionError, isTransactionConflict, retryTransient } from './db.js';
import type { Context, NodeDef, Workflow } from './definitions.js';
import { describeError, errorEntry } from './error-entry.js';
import {
  InputValidationError,
  isNonRetryable,
  LeaseLostError,
  PayloadError,
  StepTimeoutError,
  zodIssues,
} from './errors.js';
import { encodePayload } from './json.js';
import { LazyChildLogger, type Logger } from './logger.js';
import type { ClaimedStep } from './sql/claim.js';
import { completeStep, failStep } from './sql/complete.js';
import { isStepCompletedBy, isStepHeld } from './sql/fence.js';
import type { StepErrorKind, Tx } from './types.js';
import type { WorkerStats } from './worker.js';

/** What the worker keeps of a running step. */
export interface StepHandle {
  readonly runId: string;
  readonly node: string;
  readonly attempt: number;
  /** Settles when the step's outcome is recorded (or given up). Never rejects. */
  readonly done: Promise<void>;
  /** True once the handler settled: the heartbeat leaves the step alone. */
  readonly finishing: boolean;
  /** The heartbeat found the lease lost: abort `ctx.signal` with `LeaseLostError`. */
  leaseLost(): void;
  /** Hard stop: abort `ctx.signal` with `reason`. */
  abort(reason: Error): void;
}

interface Env {
  client: Client;
  pool: pg.Pool;
  workflow: Workflow<unknown>;
  log: Logger;
  stats: WorkerStats;
  /** Batches completions of steps without a completionTx. */
  completions: CompletionBatcher;
  /** The worker's pool for control statements (claims, heartbeats); never held by handlers. */
  controlPool: pg.Pool;
  /** Called once when the handler settled (the step is being recorded): its slot may be reused. */
  onFinishing(): void;
  /** How long (ms) to keep retrying a write whose connection failed. */
  retryDeadlineMs: number;
  stopping(): boolean;
}

type Failure = {
  kind: StepErrorKind;
  error: unknown;
  nonRetryable: boolean;
  /**
   * Give the attempt back (see sql.fail): it was cut short by the worker's stop, or its
   * completionTx lost a conflict with another transaction; neither is the handler's doing.
   */
  refundAttempt?: boolean;
};

/** Starts running one claimed step; see `StepHandle`. */
export function runStep(row: ClaimedStep, env: Env): StepHandle {
  const ac = new AbortController();
  let finishing = false;
  const handle: StepHandle = {
    runId: row.run_id,
    node: row.node,
    attempt: row.attempt,
    done: Promise.resolve(),
    get finishing() {
      return finishing;
    },
    leaseLost: () => ac.abort(new LeaseLostError(row.run_id, row.node, row.attempt)),
    abort: (reason) => ac.abort(reason),
  };
  (handle as { done: Promise<void> }).done = execute(row, env, ac, () => {
    if (finishing) return;
    finishing = true;
    env.onFinishing();
  }).catch((err) => {
    env.log.error({ err: String(err), runId: row.run_id, node: row.node }, 'step runner failed');
  });
  return handle;
}

async function execute(
  row: ClaimedStep,
  env: Env,
  ac: AbortController,
  markFinishing: () => void,
): Promise<void> {
  const { client, pool } = env;
  const log: Logger = new LazyChildLogger(env.log, {
    runId: row.run_id,
    node: row.node,
    attempt: row.attempt,
  });
  const node = env.workflow.nodeByName.get(row.node);
  if (!node) {
    markFinishing();
    await recordFailure(row, env, log, {
      kind: 'input_invalid',
      nonRetryable: true,
      error: new Error(
        `this worker's definition of workflow '${row.workflow}' has no node '${row.node}'`,
      ),
    });
    return;
  }

  // The completion transaction, opened on demand by the handler.
  let tx: pg.PoolClient | undefined;
  let txOpening: Promise<Tx> | undefined;
  let ended = false;
  /** Handler queries on the transaction still running. */
  let txBusy = 0;
  const onTxError = (err: Error) =>
    log.warn({ err: err.message }, 'completion transaction connection lost');
  /** Returns the transaction's connection to the pool (destroyed when `err` is given). */
  const release = (c: pg.PoolClient, err?: unknown) => {
    c.removeListener('error', onTxError);
    c.release(err === undefined ? undefined : (err as Error));
  };
  const txApi: Tx = {
    query: async (text, values) => {
      if (ended || !tx) throw new LeaseLostError(row.run_id, row.node, row.attempt);
      txBusy++;
      try {
        return (await tx.query(text, values)) as never;
      } finally {
        txBusy--;
      }
    },
  };
  const ctx: Context = {
    runId: row.run_id,
    node: row.node,
    attempt: row.attempt,
    workflow: row.workflow,
    action: row.action,
    signal: ac.signal,
    log,
    client,
    completionTx() {
      if (ended) return Promise.reject(new LeaseLostError(row.run_id, row.node, row.attempt));
      txOpening ??= (async () => {
        const c = await pool.connect();
        // A checked-out client has no 'error' listener of the pool's: without ours, a connection
        // that dies while the handler holds the transaction would crash the process.
        c.on('error', onTxError);
        try {
          await c.query('BEGIN');
        } catch (err) {
          release(c, err);
          throw err;
        }
        tx = c;
        return txApi;
      })();
      return txOpening;
    },
    upstream<T>(name: string): T {
      if (!node.ancestors.includes(name)) {
        throw new Error(
          `node '${name}' is not upstream of '${row.node}' in workflow '${row.workflow}'`,
        );
      }
      return row.upstream[name] as T;
    },
    async assertLease() {
      // On the open transaction if there is one, else on the control pool: never wait for a
      // step-pool connection that handlers holding transactions may all have taken.
      const db: Tx = tx && !ended ? txApi : env.controlPool;
      const held = await isStepHeld(db, client.db, {
        runId: row.run_id,
        node: row.node,
        attempt: row.attempt,
      });
      if (!held || ac.signal.aborted) throw new LeaseLostError(row.run_id, row.node, row.attempt);
    },
  };

  /** Ends the completion transaction: refuses further handler queries, rolls back, releases. */
  const closeTx = async (): Promise<void> => {
    ended = true;
    if (!txOpening) return;
    const opened = await txOpening.then(
      () => true,
      () => false,
    );
    if (!opened || !tx) return;
    const c = tx;
    tx = undefined;
    if (txBusy > 0) {
      // A handler query is still running (a lock wait, a slow statement): a ROLLBACK would queue
      // behind it. Cancel it and drop the connection; the server rolls the transaction back.
      const pid = (c as unknown as { processID?: number }).processID;
      if (pid) {
        await env.controlPool.query('SELECT pg_cancel_backend($1)', [pid]).catch(() => {});
      }
      release(c, new Error('the attempt ended while a completionTx query was running'));
      return;
    }
    try {
      await c.query('ROLLBACK');
      release(c);
    } catch (err) {
      release(c, err);
    }
  };

  let input: unknown;
  try {
    input = mapInput(node, row);
  } catch (err) {
    markFinishing();
    await recordFailure(row, env, log, { kind: 'input_invalid', nonRetryable: true, error: err });
    return;
  }

  // The handler, raced against the abort (timeout, lease loss, hard stop).
  const timeoutMs = node.action.timeoutMs;
  const timer = timeoutMs
    ? setTimeout(() => ac.abort(new StepTimeoutError(timeoutMs)), timeoutMs)
    : undefined;
  type Outcome = { ok: true; value: unknown } | { ok: false; error: unknown; aborted: boolean };
  const aborted = new Promise<Outcome>((resolve) => {
    const onAbort = () => resolve({ ok: false, error: ac.signal.reason, aborted: true });
    if (ac.signal.aborted) onAbort();
    else ac.signal.addEventListener('abort', onAbort, { once: true });
  });
  const ran = (async () => node.action.handler(ctx, input))().then(
    (value): Outcome => ({ ok: true, value }),
    (error): Outcome => ({ ok: false, error, aborted: false }),
  );
  const outcome = await Promise.race([ran, aborted]);
  clearTimeout(timer);
  markFinishing();

  if (!outcome.ok) {
    await closeTx();
    const error = outcome.error;
    if (LeaseLostError.isInstance(error)) {
      env.stats.leaseLost++;
      log.warn({}, 'lease lost while the handler ran; the step belongs to another claim now');
      return;
    }
    if (outcome.aborted && !StepTimeoutError.isInstance(error)) {
      await recordFailure(
        row,
        env,
        log,
        { kind: 'worker_stopped', nonRetryable: false, error, refundAttempt: true },
        0,
      );
      return;
    }
    await recordFailure(row, env, log, {
      kind: StepTimeoutError.isInstance(error)
        ? 'timeout'
        : isNonRetryable(error)
          ? 'non_retryable'
          : 'error',
      nonRetryable: isNonRetryable(error),
      error,
    });
    return;
  }

  let output: string;
  try {
    output = encodePayload(
      outcome.value === undefined ? null : outcome.value,
      client.maxPayloadBytes,
      `the output of node '${row.node}'`,
    ).text;
  } catch (err) {
    await closeTx();
    const error =
      err instanceof PayloadError
        ? new PayloadError(
            `the handler's output cannot be stored: ${err.message.replace(/ at \S+$/, '')}`,
            err.path,
          )
        : err;
    await recordFailure(row, env, log, { kind: 'output_invalid', nonRetryable: true, error });
    return;
  }

  if (tx && !ended) {
    // Complete on the handler's transaction: its writes and the transition commit together.
    const c = tx;
    ended = true;
    tx = undefined;
    let done = 0;
    try {
      // The batcher's fenced transition, in its single-step form (sql.completeOne).
      const r = await completeStep(c, client.db, {
        runId: row.run_id,
        node: row.node,
        attempt: row.attempt,
        output,
      });
      done = r.length;
      if (done === 0) {
        await c.query('ROLLBACK');
        release(c);
        env.stats.leaseLost++;
        log.warn(
          { err: new LeaseLostError(row.run_id, row.node, row.attempt).message },
          'completion fenced out; business writes rolled back',
        );
        return;
      }
      await c.query('COMMIT');
      release(c);
      env.stats.completed++;
      return;
    } catch (err) {
      release(c, err);
      if (isConnectionError(err) && done === 1 && (await completedByUs(row, env))) {
        env.stats.completed++;
        return;
      }
      // The transaction is rolled back (the statement failed or the connection died before
      // COMMIT): record the attempt as failed. A deadlock or serialization failure is a conflict
      // between transactions, not the handler's fault: the attempt is given back and the step
      // retried at once, so it never uses up maxAttempts (the handler runs again: at-least-once).
      if (isTransactionConflict(err)) {
        await recordFailure(
          row,
          env,
          log,
          { kind: 'conflict', nonRetryable: false, error: err, refundAttempt: true },
          0,
        );
        return;
      }
      await recordFailure(row, env, log, { kind: 'error', nonRetryable: false, error: err });
      return;
    }
  }
  await closeTx();
  try {
    // No completionTx: the worker's batcher completes it with other steps in one statement.
    const done = await retryTransient(
      () => env.completions.complete(row.run_id, row.node, row.attempt, output),
      { deadlineMs: env.retryDeadlineMs, log },
    );
    if (done === 1 || (await completedByUs(row, env))) {
      env.stats.completed++;
    } else {
      env.stats.leaseLost++;
      log.warn(
        { err: new LeaseLostError(row.run_id, row.node, row.attempt).message },
        'completion fenced out',
      );
    }
  } catch (err) {
    if (isConnectionError(err) || isTransactionConflict(err)) {
      log.error(
        { err: String(err) },
        'could not record completion; the lease will expire and the step run again',
      );
      return;
    }
    // The database refused the completion itself: record it as a failed attempt (with the
    // backoff) instead of leaving the step to the sweep with its cause lost.
    await recordFailure(row, env, log, {
      kind: 'error',
      nonRetryable: false,
      error: new Error(`the completion could not be stored: ${describeError(err)}`),
    });
  }
}

/** The node's input: the mapping of run input and upstream outputs, validated by the action. */
function mapInput(node: NodeDef<unknown>, row: ClaimedStep): unknown {
  let mapped: unknown;
  try {
    mapped = node.input ? node.input(row.run_input, row.upstream) : row.run_input;
  } catch (err) {
    throw new InputValidationError(
      row.workflow,
      [{ path: [], message: `input mapping threw: ${describeError(err)}` }],
      row.node,
    );
  }
  const schema = node.action.inputSchema;
  if (!schema) return mapped;
  const r = schema.safeParse(mapped);
  if (!r.success) throw new InputValidationError(row.workflow, zodIssues(r.error.issues), row.node);
  return r.data;
}

/** After an unknown outcome: is the step completed at our attempt (our commit went through)? */
async function completedByUs(row: ClaimedStep, env: Env): Promise<boolean> {
  try {
    return await retryTransient(
      () =>
        isStepCompletedBy(env.pool, env.client.db, {
          runId: row.run_id,
          node: row.node,
          attempt: row.attempt,
        }),
      { deadlineMs: env.retryDeadlineMs, log: env.log },
    );
  } catch {
    return false;
  }
}

/** Records a failed attempt (fenced): retryable after the backoff, or discarded. */
async function recordFailure(
  row: ClaimedStep,
  env: Env,
  log: Logger,
  failure: Failure,
  delayOverrideMs?: number,
): Promise<void> {
  const node = env.workflow.nodeByName.get(row.node);
  let delay = delayOverrideMs ?? 0;
  if (delayOverrideMs === undefined && node) {
    try {
      delay = node.action.backoff(row.attempt);
    } catch {
      delay = 1000;
    }
    if (!Number.isFinite(delay) || delay < 0) delay = 1000;
  }
  const entry = errorEntry(failure.error, row.attempt, failure.kind);
  const entryText = JSON.stringify(entry);
  try {
    const rows = await retryTransient(
      () =>
        failStep(env.pool, env.client.db, {
          runId: row.run_id,
          node: row.node,
          attempt: row.attempt,
          entry: entryText,
          delayMs: delay,
          nonRetryable: failure.nonRetryable,
          workflow: row.workflow,
          refundAttempt: failure.refundAttempt ?? false,
        }),
      { deadlineMs: env.retryDeadlineMs, log },
    );
    if (rows.length === 0) {
      env.stats.leaseLost++;
      log.warn({ kind: failure.kind }, 'failure not recorded: the lease was already lost');
      return;
    }
    env.stats.failed++;
    log.warn(
      { kind: failure.kind, err: entry.message, state: rows[0]?.step_state, delayMs: delay },
      'step attempt failed',
    );
  } catch (err) {
    log.error(
      { err: String(err) },
      'could not record the failure; the lease will expire and the step run again',
    );
  }
}
