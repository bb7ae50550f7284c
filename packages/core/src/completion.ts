/**
 * The only module that records an attempt's outcome. A completion goes by one of two routes:
 * committed on the handler's `completionTx` together with its writes, or handed to the worker's
 * batcher (group commit). A failure is recorded with its backoff. Every write is fenced on the
 * claim's attempt, so an attempt whose lease was lost changes nothing.
 */
import type pg from 'pg';
import type { BatchEntry, CompletionBatcher } from './completion-batcher.js';
import type { CompletionTx } from './completion-tx.js';
import {
  isConnectionError,
  isTransactionConflict,
  retryTransient,
  sleep,
  transientRetryDelay,
} from './db.js';
import type { Backoff } from './definitions.js';
import { describeError, errorEntry } from './error-entry.js';
import { LeaseLostError } from './errors.js';
import { type Discarded, Outcome, type Retryable } from './execute-step.js';
import type { Logger } from './logger.js';
import type { Recorded } from './recorded.js';
import type { ClaimedStep } from './sql/claim.js';
import { completeStepOnTx, failStep, isFencedOut, skipStep, snoozeStep } from './sql/complete.js';
import { isStepCompletedBy } from './sql/fence.js';
import type { SqlScope } from './sql/statement.js';

/** The worker's counters a completion moves (`WorkerStats`). */
export interface CompletionCounters {
  completed: number;
  failed: number;
  /** Completions or failures refused by the fence: the lease had been lost. */
  leaseLost: number;
  /** Attempts that snoozed (`SnoozeError`). */
  snoozed: number;
}

/** What the completer needs of its worker. */
export interface CompleterParts {
  /** The statements' schema, channel and prepare flag. */
  db: SqlScope;
  /** The step pool: failures, and the check after a completion with an unknown outcome. */
  pool: pg.Pool;
  /** Group commit for completions without a completionTx. */
  batcher: CompletionBatcher;
  /** How long (ms) to keep retrying a write whose connection failed. */
  retryDeadlineMs: number;
  /**
   * The longest a handler's transaction may sit idle on the server once its completion ran and
   * before its COMMIT (ms): the lease, so it never outlives the claim whatever the network does.
   */
  idleLimitMs: number;
  /** The worker's logger (the check after an unknown outcome logs its retries there). */
  log: Logger;
  counters: CompletionCounters;
  /**
   * Told of every attempt's recorded outcome, after it was recorded (the worker's throughput
   * counts, kept in memory): must not throw or wait.
   */
  recorded?(workflow: string, recorded: Recorded): void;
}

const LEASE_LOST: Recorded = { outcome: 'lease_lost' };
const COMPLETED: Recorded = { outcome: 'completed' };
const SKIPPED: Recorded = { outcome: 'skipped' };

/**
 * One attempt being recorded: the claimed step, its transaction, its logger and backoff. It is
 * its own entry in the completion batch (`BatchEntry`: its identity, and the output set there).
 */
export interface Attempt extends BatchEntry {
  row: ClaimedStep;
  /** The completion transaction: made when the handler first asked for it, else undefined. */
  readonly tx: CompletionTx | undefined;
  /** Ends the attempt's use of its completion transaction: later `ctx.completionTx()` refused. */
  endTx(): void;
  /** The step's logger (bound to runId, node and attempt). */
  log: Logger;
  /** The action's backoff; undefined when the worker does not know the node. */
  backoff: Backoff | undefined;
}

/** Ends the attempt's completion transaction: rolled back and released if one was opened. */
function closeTx(attempt: Attempt): Promise<void> | undefined {
  attempt.endTx();
  return attempt.tx?.close();
}

/** Records outcomes; one per worker. */
export class Completer {
  constructor(private readonly parts: CompleterParts) {}

  /**
   * Records `outcome` for `attempt`. Never rejects: what cannot be recorded is logged.
   * @returns what was recorded.
   */
  async record(attempt: Attempt, outcome: Outcome): Promise<Recorded> {
    // The usual case, a completion without a completionTx, straight to the batch: one async call
    // fewer per step, since every promise made per step is kept until its batch commits.
    const recorded =
      outcome.kind === 'completed' && attempt.tx === undefined
        ? await this.completeInBatch(attempt, outcome.output)
        : await this.recordOutcome(attempt, outcome);
    this.parts.recorded?.(attempt.row.workflow, recorded);
    return recorded;
  }

  private async recordOutcome(attempt: Attempt, outcome: Outcome): Promise<Recorded> {
    switch (outcome.kind) {
      case 'completed':
        return this.complete(attempt, outcome.output);
      case 'retryable':
      case 'discarded':
        await closeTx(attempt);
        return this.fail(attempt, outcome);
      case 'snoozed':
        await closeTx(attempt);
        return this.snooze(attempt, outcome.delayMs, outcome.code);
      case 'skipped':
        await closeTx(attempt);
        return this.skip(attempt);
      case 'lease_lost':
        await closeTx(attempt);
        this.parts.counters.leaseLost++;
        attempt.log.warn(
          {},
          'lease lost while the handler ran (the run was cancelled, or the step reclaimed or timed out); its outcome is not recorded',
        );
        return LEASE_LOST;
      default:
        return outcome satisfies never;
    }
  }

  /** Completes the step: on the handler's transaction if it opened one, else in a batch. */
  private async complete(attempt: Attempt, output: string): Promise<Recorded> {
    const { row, tx, log } = attempt;
    const { db, counters } = this.parts;
    const c = tx?.take();
    if (tx && c) {
      // Complete on the handler's transaction: its writes and the transition commit together.
      let sent = false;
      try {
        await tx.began();
        await tx.commitWith(
          c,
          () =>
            completeStepOnTx(c, db, {
              runId: row.run_id,
              node: row.node,
              attempt: row.attempt,
              output,
              leaf: row.leaf === true,
              idleLimitMs: this.parts.idleLimitMs,
            }),
          () => {
            sent = true;
          },
        );
        tx.release(c);
        counters.completed++;
        return COMPLETED;
      } catch (err) {
        if (isFencedOut(err)) {
          // The transaction is aborted: rolled back by the COMMIT sent with the completion on a
          // pipelined connection (commitWith), else here.
          if (!c.pipeline) await c.query('ROLLBACK').catch(() => {});
          tx.release(c);
          counters.leaseLost++;
          log.warn(
            { err: new LeaseLostError(row.run_id, row.node, row.attempt).message },
            'completion fenced out; business writes rolled back',
          );
          return LEASE_LOST;
        }
        tx.release(c, err);
        // The COMMIT went out: a lost connection may have come after it went through.
        if (isConnectionError(err) && sent && (await this.completedByUs(row))) {
          counters.completed++;
          return COMPLETED;
        }
        // The transaction is rolled back (the statement failed or the connection died before
        // COMMIT): record the attempt as failed. A deadlock or serialization failure is a
        // conflict between transactions, not the handler's fault: the attempt is given back and
        // retried at once, so it never uses up maxAttempts (the handler runs again).
        if (isTransactionConflict(err)) {
          return this.fail(
            attempt,
            Outcome.retryable('conflict', err, { refundAttempt: true, delayMs: 0 }),
          );
        }
        return this.fail(attempt, Outcome.retryable('error', err));
      }
    }
    // Asked for but not open (its open failed): closed, then completed in a batch.
    await closeTx(attempt);
    return this.completeInBatch(attempt, output);
  }

  /**
   * Completes the step in the batcher's next statement with other steps, retried while that
   * fails transiently (as `retryTransient`, without its closure and policy object per step).
   */
  private async completeInBatch(attempt: Attempt, output: string): Promise<Recorded> {
    // The step's logger is made on first use: read it only to log.
    const { row } = attempt;
    const { batcher, retryDeadlineMs, counters } = this.parts;
    // Most steps never asked for a completionTx: nothing to close then, and no promise to wait on.
    attempt.endTx();
    attempt.output = output;
    try {
      const deadline = Date.now() + retryDeadlineMs;
      let done: 0 | 1;
      for (let i = 0; ; i++) {
        try {
          done = await batcher.add(attempt);
          break;
        } catch (err) {
          await sleep(transientRetryDelay(err, i, deadline, attempt.log));
        }
      }
      if (done === 1 || (await this.completedByUs(row))) {
        counters.completed++;
        return COMPLETED;
      }
      counters.leaseLost++;
      attempt.log.warn(
        { err: new LeaseLostError(row.run_id, row.node, row.attempt).message },
        'completion fenced out',
      );
      return LEASE_LOST;
    } catch (err) {
      if (isConnectionError(err) || isTransactionConflict(err)) {
        attempt.log.error(
          { err: String(err) },
          'could not record completion; the lease will expire and the step run again',
        );
        return { outcome: 'unrecorded', error: err };
      }
      // The database refused the completion itself: record it as a failed attempt (with the
      // backoff) instead of leaving the step to the sweep with its cause lost.
      return this.fail(
        attempt,
        Outcome.retryable(
          'error',
          new Error(`the completion could not be stored: ${describeError(err)}`),
        ),
      );
    }
  }

  /** After an unknown outcome: is the step completed at our attempt (our commit went through)? */
  private async completedByUs(row: ClaimedStep): Promise<boolean> {
    const { db, pool, retryDeadlineMs, log } = this.parts;
    try {
      return await retryTransient(
        () =>
          isStepCompletedBy(pool, db, { runId: row.run_id, node: row.node, attempt: row.attempt }),
        { deadlineMs: retryDeadlineMs, log },
      );
    } catch {
      return false;
    }
  }

  /** Ends the step `skipped` (fenced): its condition was false; downstream nodes go on. */
  private async skip(attempt: Attempt): Promise<Recorded> {
    const { row, log } = attempt;
    const { db, pool, retryDeadlineMs, counters } = this.parts;
    try {
      const rows = await retryTransient(
        () =>
          skipStep(pool, db, {
            runId: row.run_id,
            node: row.node,
            attempt: row.attempt,
            leaf: row.leaf === true,
          }),
        { deadlineMs: retryDeadlineMs, log },
      );
      if (rows.length === 0) {
        counters.leaseLost++;
        log.warn({}, 'skip not recorded: the lease was already lost');
        return LEASE_LOST;
      }
      counters.completed++;
      log.debug({}, 'step skipped: its condition was false');
      return SKIPPED;
    } catch (err) {
      log.error(
        { err: String(err) },
        'could not record the skip; the lease will expire and the step run again',
      );
      return { outcome: 'unrecorded', error: err };
    }
  }

  /** Records a snooze (fenced): `scheduled` again after `delayMs`, the attempt given back. */
  private async snooze(attempt: Attempt, delayMs: number, code: string): Promise<Recorded> {
    const { row, log } = attempt;
    const { db, pool, retryDeadlineMs, counters } = this.parts;
    try {
      const rows = await retryTransient(
        () =>
          snoozeStep(pool, db, {
            runId: row.run_id,
            node: row.node,
            attempt: row.attempt,
            delayMs,
          }),
        { deadlineMs: retryDeadlineMs, log },
      );
      if (rows.length === 0) {
        counters.leaseLost++;
        log.warn({}, 'snooze not recorded: the lease was already lost');
        return LEASE_LOST;
      }
      counters.snoozed++;
      log.debug({ delayMs, snoozes: rows[0]?.snoozes }, 'step snoozed');
      return { outcome: 'snoozed', snooze: { code, delayMs } };
    } catch (err) {
      log.error(
        { err: String(err) },
        'could not record the snooze; the lease will expire and the step run again',
      );
      return { outcome: 'unrecorded', error: err };
    }
  }

  /** Records a failed attempt (fenced): retryable after the backoff, or discarded. */
  private async fail(attempt: Attempt, failure: Retryable | Discarded): Promise<Recorded> {
    const { row, log, backoff } = attempt;
    const { db, pool, retryDeadlineMs, counters } = this.parts;
    const override = failure.kind === 'retryable' ? failure.delayMs : undefined;
    let delay = override ?? 0;
    if (override === undefined && backoff) {
      try {
        delay = backoff(row.attempt);
      } catch {
        delay = 1000;
      }
      if (!Number.isFinite(delay) || delay < 0) delay = 1000;
    }
    const entry = errorEntry(failure.error, row.attempt, failure.errorKind);
    const entryText = JSON.stringify(entry);
    try {
      const rows = await retryTransient(
        () =>
          failStep(pool, db, {
            runId: row.run_id,
            node: row.node,
            attempt: row.attempt,
            entry: entryText,
            delayMs: delay,
            nonRetryable: failure.kind === 'discarded',
            workflow: row.workflow,
            refundAttempt: failure.kind === 'retryable' && failure.refundAttempt,
          }),
        { deadlineMs: retryDeadlineMs, log },
      );
      if (rows.length === 0) {
        counters.leaseLost++;
        log.warn({ kind: failure.errorKind }, 'failure not recorded: the lease was already lost');
        return LEASE_LOST;
      }
      counters.failed++;
      const state = rows[0]?.step_state;
      const recorded: Recorded = {
        outcome: state === 'discarded' ? 'discarded' : 'retryable',
        error: failure.error,
        errorKind: failure.errorKind,
      };
      if (state === 'discarded') {
        // An error: nothing retries it, and its run fails unless an operator steps in.
        log.error(
          { kind: failure.errorKind, err: entry.message, state },
          `step discarded, no further attempt (\`cyclone retry ${row.run_id} ${row.node}\` reopens it)`,
        );
      } else {
        log.warn(
          { kind: failure.errorKind, err: entry.message, state, delayMs: delay },
          'step attempt failed',
        );
      }
      return recorded;
    } catch (err) {
      log.error(
        { err: String(err) },
        'could not record the failure; the lease will expire and the step run again',
      );
      return { outcome: 'unrecorded', error: failure.error, errorKind: failure.errorKind };
    }
  }
}
