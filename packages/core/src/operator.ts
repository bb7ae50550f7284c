/**
 * Operator actions (`Client.retry`, `retryAll`, `cancel`): each runs in one transaction that
 * holds the run row's lock, so it never interleaves with a completion or another action on the
 * same run, and is run again when it loses a deadlock or serialization failure.
 */
import type pg from 'pg';
import { type Db, withTransactionRetried } from './db.js';
import { InvalidStateError, NodeNotFoundError, RunNotFoundError } from './errors.js';
import { isUuid } from './inspect.js';
import { isStorableText } from './json.js';
import * as runsSql from './sql/runs.js';

/** Tries of an operator transaction that keeps losing lock conflicts. */
const MAX_TRIES = 5;

/** `Client.retry`: reopens one discarded or cancelled node of the run. */
export function retry(db: Db, runId: string, node: string): Promise<string[]> {
  return reopen(db, runId, node);
}

/** `Client.retryAll`: reopens every discarded or cancelled node of the run. */
export function retryAll(db: Db, runId: string): Promise<string[]> {
  return reopen(db, runId, undefined);
}

/** What `cancelRun` did: whether the run was cancelled now, and how many steps with it. */
export interface CancelOutcome {
  /** False when the run was already cancelled (nothing changed). */
  cancelled: boolean;
  /** Steps moved to `cancelled` (0 for a run that had already finished its work). */
  steps: number;
}

/** `Client.cancel`; see `cancelRun`. */
export async function cancel(db: Db, runId: string): Promise<void> {
  await cancelRun(db, runId);
}

/**
 * Every unfinished step `cancelled`, then the run. A cancelled run is left as it is (`cancelled:
 * false`); a completed one is refused.
 * @throws RunNotFoundError; InvalidStateError for a completed run.
 */
export async function cancelRun(db: Db, runId: string): Promise<CancelOutcome> {
  if (!isUuid(runId)) throw new RunNotFoundError(String(runId));
  return inRunTx(db, runId, async (c, run) => {
    if (run.state === 'cancelled') return { cancelled: false, steps: 0 };
    if (run.state === 'completed') {
      throw new InvalidStateError(
        runId,
        undefined,
        run.state,
        `run ${runId} is completed; it cannot be cancelled`,
      );
    }
    return { cancelled: true, steps: await runsSql.cancelRun(c, db, runId) };
  });
}

/**
 * Reopens `node` (or, when undefined, every discarded or cancelled node) and puts the run back to
 * `running`, waking its workers.
 * @returns the nodes reopened.
 * @throws NodeNotFoundError; InvalidStateError when the node is not discarded or cancelled, or
 *   when nothing reopened can run (an upstream is not done).
 */
async function reopen(db: Db, runId: string, node: string | undefined): Promise<string[]> {
  if (!isUuid(runId)) throw new RunNotFoundError(String(runId));
  return inRunTx(db, runId, async (c, run) => {
    if (node !== undefined) {
      // No node can have a name PostgreSQL cannot store (NUL, lone surrogates).
      if (typeof node !== 'string' || !isStorableText(node)) {
        throw new NodeNotFoundError(runId, String(node));
      }
      const step = await runsSql.lockStep(c, db, { runId, node });
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
    const rows = await runsSql.reopenSteps(c, db, { runId, node: node ?? null });
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
    await runsSql.reactivateRun(c, db, { runId, activated });
    await runsSql.notifyWorkflow(c, db, run.workflow);
    return rows.map((r) => r.node);
  });
}

/**
 * Runs `fn` in a transaction holding the run row's lock. Retries on deadlock or serialization
 * failure (SQLSTATE 40P01, 40001), up to `MAX_TRIES` tries in all.
 * @throws RunNotFoundError when there is no such run.
 */
async function inRunTx<T>(
  db: Db,
  runId: string,
  fn: (c: pg.PoolClient, run: runsSql.LockedRun) => Promise<T>,
): Promise<T> {
  return withTransactionRetried(
    db.pool,
    async (c) => {
      const run = await runsSql.lockRun(c, db, runId);
      if (!run) throw new RunNotFoundError(runId);
      return await fn(c, run);
    },
    MAX_TRIES,
  );
}
