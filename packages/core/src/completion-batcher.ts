/**
 * Group commit for completions without a `completionTx`, so that a busy worker sends one
 * statement per batch instead of one per step: while one batch statement is in flight,
 * completions queue; when it returns, everything queued goes out in the next single statement
 * (`completeSteps`). The first statement after an idle moment waits one turn of the event loop,
 * so that steps settling together (a claim's steps, several workers' on one pool) go in it
 * together rather than the first alone; an idle worker's lone step still completes at once.
 * Each step stays fenced on its attempt.
 */
import type pg from 'pg';
import { isConnectionError } from './db.js';
import { completeStep, completeSteps } from './sql/complete.js';
import type { SqlScope } from './sql/statement.js';

/**
 * One step waiting in a batch. The worker's claimed step is its own entry (`add`), so that
 * nothing more is made per step than the promise it waits on.
 */
export interface BatchEntry {
  readonly runId: string;
  readonly node: string;
  readonly attempt: number;
  /**
   * The step's node has no downstream node (the claim's `leaf`): a batch of leaves alone goes
   * in the cheaper leaf form; one with any other step in the full form.
   */
  readonly leaf: boolean;
  /** The output as JSON text. */
  output: string;
  /** Set by `add`: settle the entry's promise. */
  resolve: ((done: 0 | 1) => void) | undefined;
  reject: ((err: unknown) => void) | undefined;
}

/** The entry whose promise `add` is making: one executor for all of them, not a closure each. */
let adding: BatchEntry | undefined;
function keepResolvers(resolve: (done: 0 | 1) => void, reject: (err: unknown) => void): void {
  const e = adding as BatchEntry;
  e.resolve = resolve;
  e.reject = reject;
}

/** Batches fenced completions; see the module comment. */
export class CompletionBatcher {
  private queue: BatchEntry[] = [];
  private flushing = false;

  /**
   * @param pool where the batch statements run.
   * @param db the schema, channel and prepared-statement flag of the statements.
   * @param maxBatch most steps per statement (default 500).
   */
  constructor(
    private readonly pool: pg.Pool,
    private readonly db: SqlScope,
    private readonly maxBatch = 500,
  ) {}

  /**
   * Completes one step (fenced on `attempt`) with `output` (JSON text) in the next batch;
   * `leaf` as `BatchEntry.leaf`.
   * @returns 1 when completed, 0 when the fence did not match (the lease was lost).
   * @throws the database error of the batch statement (a transient one is the caller's to retry:
   *   the statement is atomic, so nothing of the failed batch was applied).
   */
  complete(
    runId: string,
    node: string,
    attempt: number,
    output: string,
    leaf = false,
  ): Promise<0 | 1> {
    return this.add({ runId, node, attempt, leaf, output, resolve: undefined, reject: undefined });
  }

  /**
   * `complete` for an entry the caller made (its `output` set): the entry itself is queued.
   * @returns as `complete`. An entry is in one batch at a time: add it again only once settled.
   */
  add(entry: BatchEntry): Promise<0 | 1> {
    adding = entry;
    const p = new Promise<0 | 1>(keepResolvers);
    adding = undefined;
    this.queue.push(entry);
    if (!this.flushing) {
      this.flushing = true;
      setImmediate(this.startFlush);
    }
    return p;
  }

  private async send(batch: BatchEntry[]): Promise<void> {
    const only = batch.length === 1 ? batch[0] : undefined;
    // Rows locked in one order by every batch, and by an operator action waiting for a run's
    // steps (sql/runs.ts lockStepsWaitingSql): many steps of one run in two batches never deadlock.
    if (!only) batch.sort(byStep);
    // A batch of one (an idle worker completes at once) goes in the form PostgreSQL plans once.
    // Either statement takes the leaf form when every step is a leaf.
    const rows = only
      ? await completeStep(this.pool, this.db, only)
      : await completeSteps(this.pool, this.db, batch);
    // A row per step completed, and no step twice in a batch (one claim per attempt): as many
    // rows as steps means every one completed, the usual case, with no key to build.
    if (rows.length === batch.length) {
      for (const p of batch) settle(p, 1);
      return;
    }
    // Keyed by attempt too: a node re-claimed by this worker may be here at two attempts.
    const done = new Set(rows.map((r) => `${r.run_id}\u0000${r.node}\u0000${r.attempt}`));
    for (const p of batch)
      settle(p, done.has(`${p.runId}\u0000${p.node}\u0000${p.attempt}`) ? 1 : 0);
  }

  /** `flush`, made once: `add` schedules it for the next turn of the event loop. */
  private readonly startFlush = (): void => {
    void this.flush();
  };

  private async flush(): Promise<void> {
    this.flushing = true;
    try {
      while (this.queue.length > 0) {
        const batch = this.queue.splice(0, this.maxBatch);
        try {
          await this.send(batch);
        } catch (err) {
          if (batch.length === 1 || isConnectionError(err)) {
            for (const p of batch) fail(p, err);
            continue;
          }
          // One step's data may have made the whole statement fail: settle each on its own, so
          // only that step sees the error.
          for (const p of batch) await this.send([p]).catch((e) => fail(p, e));
        }
      }
    } finally {
      this.flushing = false;
    }
  }
}

/** Run id, then node, by UTF-16 code units (PostgreSQL's `COLLATE "C"` for the ASCII names). */
function byStep(a: BatchEntry, b: BatchEntry): number {
  if (a.runId !== b.runId) return a.runId < b.runId ? -1 : 1;
  return a.node < b.node ? -1 : a.node > b.node ? 1 : 0;
}

/** Resolves an entry's promise, dropping its resolvers (the entry may be added again). */
function settle(p: BatchEntry, done: 0 | 1): void {
  const r = p.resolve;
  p.resolve = p.reject = undefined;
  r?.(done);
}

/** Rejects an entry's promise, dropping its resolvers. */
function fail(p: BatchEntry, err: unknown): void {
  const r = p.reject;
  p.resolve = p.reject = undefined;
  r?.(err);
}
