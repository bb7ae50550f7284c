/**
 * Operator actions (`Client.retry`, `retryAll`, `cancel`): each runs in one transaction that
 * holds the locks of the run's row and of all its step rows, so it never interleaves with a
 * completion, a failure, the sweep or another action on the same run.
 *
 * Lock order: workers lock step rows, then run rows (completion, failure, sweep); a signal locks
 * the run row (`FOR KEY SHARE`), then its wait steps; retention locks the run row, then deletes
 * its steps. No one order fits all of them (a completion batch orders a run's steps by node, not
 * by depth), so an operator action never waits for a row while it holds another: it takes them
 * all at once without waiting (`SKIP LOCKED`); if one is held, it lets go of everything, waits
 * for that row alone in a new transaction, and tries again. A transaction that waits while
 * holding nothing cannot be part of a deadlock. That takes every row free at one instant, which a
 * busy run (hundreds of steps claimed and completed each second) may never offer: after
 * `ROUNDS_MS` (or `MAX_ROUNDS` rounds) it waits for each lock in turn instead (steps in
 * topological order, then the run), run again on a deadlock.
 */
import type pg from 'pg';
import { type Db, withTransactionRetried } from './db.js';
import { InvalidStateError, NodeNotFoundError, RunNotFoundError } from './errors.js';
import { isUuid } from './inspect.js';
import { isStorableText } from './json.js';
import * as runsSql from './sql/runs.js';

/** Tries of an operator transaction that keeps losing lock conflicts. */
const MAX_TRIES = 5;

/** Rounds of "lock all without waiting, else wait for the held row" before waiting in turn. */
const MAX_ROUNDS = 50;

/** Time for such rounds before waiting in turn: a busy run never has all its rows free at once. */
const ROUNDS_MS = 200;

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
      const state = run.steps.get(node);
      if (state === undefined) throw new NodeNotFoundError(runId, node);
      if (state !== 'discarded' && state !== 'cancelled') {
        throw new InvalidStateError(
          runId,
          node,
          state,
          `node '${node}' of run ${runId} is ${state}; only a discarded or cancelled node can be retried`,
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
 * Runs `fn` in a transaction holding the locks of the run's row and all its step rows, taken as
 * the module comment says. Each transaction is run again on a deadlock or serialization failure
 * (SQLSTATE 40P01, 40001), up to `MAX_TRIES` tries in all.
 * @throws RunNotFoundError when there is no such run.
 */
async function inRunTx<T>(
  db: Db,
  runId: string,
  fn: (c: pg.PoolClient, run: runsSql.LockedRun) => Promise<T>,
): Promise<T> {
  let busy: { node: string } | { run: true } | undefined;
  const start = Date.now();
  for (let round = 1; ; round++) {
    const held = busy;
    const last = round >= MAX_ROUNDS || Date.now() - start >= ROUNDS_MS;
    const result = await withTransactionRetried(
      db.pool,
      async (c): Promise<{ done: T } | { busy: { node: string } | { run: true } }> => {
        let run: runsSql.LockedRun | undefined;
        if (last) {
          run = await runsSql.lockRunWaiting(c, db, runId);
        } else {
          if (held) await runsSql.waitForRow(c, db, runId, held);
          const got = await runsSql.lockRunNow(c, db, runId);
          // Nothing is written yet: committing only lets go of the locks taken.
          if ('busy' in got) return { busy: got.busy };
          if ('locked' in got) run = got.locked;
        }
        if (!run) throw new RunNotFoundError(runId);
        return { done: await fn(c, run) };
      },
      MAX_TRIES,
    );
    if ('done' in result) return result.done;
    busy = result.busy;
  }
}
