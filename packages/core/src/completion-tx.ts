/**
 * `ctx.completionTx()`: the transaction a handler opens on demand so that its writes commit
 * together with the step's `completed` transition. It is opened on the first call, its queries
 * are refused once the attempt ended, and it is either handed to the completion (`take`) or
 * closed: rolled back, or cancelled when a handler query is still running on it.
 *
 * On a pipelined connection (the worker's own step pool, `pipeline: true`) BEGIN waits for the
 * handler's first query and goes out with it in one write, unanswered yet: a round trip and a
 * write system call fewer per step. The server runs them in order, so the query is inside the
 * transaction; BEGIN fails only with its session, which then runs nothing after it. The query
 * waits for both answers, and the completion is only sent once BEGIN's came back (`began`).
 * The completion and the COMMIT go out together in turn (`commitWith`): the completion fails
 * when fenced out, so that COMMIT then rolls back.
 */
import type { Writable } from 'node:stream';
import type pg from 'pg';
import { cancelStatement } from './cancel.js';
import { LeaseLostError } from './errors.js';
import type { Logger } from './logger.js';
import type { Tx } from './types.js';

/** The step a completion transaction belongs to: its identity and the claim's attempt. */
export interface TxOwner {
  readonly runId: string;
  readonly node: string;
  readonly attempt: number;
}

/** One attempt's completion transaction; see the module comment. */
export class CompletionTx {
  /**
   * The transaction's connection: once BEGIN went through, or at once on a pipelined connection,
   * where BEGIN goes out with the first query (`beginDeferred` until then).
   */
  private conn: pg.PoolClient | undefined;
  private opening: Promise<Tx> | undefined;
  /** BEGIN's answer on a pipelined connection, not waited for when sent (see the module comment). */
  private begin: Promise<void> | undefined;
  /** A pipelined connection whose BEGIN waits for the handler's first query. */
  private beginDeferred = false;
  /** Set when the attempt ended: handler queries and new opens are refused from then on. */
  private ended = false;
  /** Handler queries on the transaction still running. */
  private busy = 0;
  /**
   * What the handler gets: queries on the open transaction while the attempt lasts. Made, with
   * the connection's error listener, on the first `open()`: most steps never open one.
   */
  private api: Tx | undefined;
  private onError: ((err: Error) => void) | undefined;

  /**
   * @param step the step whose attempt the transaction belongs to (for `LeaseLostError`).
   * @param pool the step pool the transaction's connection comes from.
   * @param log the step's logger.
   */
  constructor(
    private readonly step: TxOwner,
    private readonly pool: pg.Pool,
    private readonly log: Logger,
  ) {}

  /**
   * `ctx.completionTx()`: opens the transaction on the first call (BEGIN on a step-pool
   * connection; on a pipelined one, sent with the first query); later calls return the same one.
   * @throws LeaseLostError once the attempt ended.
   */
  open(): Promise<Tx> {
    if (this.ended) return Promise.reject(this.leaseLost());
    this.opening ??= (async () => {
      const api: Tx = {
        query: async (text, values) => {
          const c = this.conn;
          if (this.ended || !c) throw this.leaseLost();
          this.busy++;
          try {
            const q = this.beginDeferred
              ? this.sendBegin(c, () => c.query(text, values))
              : c.query(text, values);
            const r = await q;
            // BEGIN was answered before this query (one connection answers in order): no wait.
            if (this.begin) await this.begin;
            return r as never;
          } finally {
            this.busy--;
          }
        },
      };
      this.api = api;
      const onError = (err: Error) =>
        this.log.warn({ err: err.message }, 'completion transaction connection lost');
      this.onError = onError;
      const c = await this.pool.connect();
      // A checked-out client has no 'error' listener of the pool's: without ours, a connection
      // that dies while the handler holds the transaction would crash the process.
      c.on('error', onError);
      if (c.pipeline) {
        this.beginDeferred = true;
        this.conn = c;
        return api;
      }
      try {
        await c.query('BEGIN');
      } catch (err) {
        this.release(c, err);
        throw err;
      }
      this.conn = c;
      return api;
    })();
    return this.opening;
  }

  /** The open transaction while the attempt lasts, else undefined (not opened, or ended). */
  current(): Tx | undefined {
    return this.conn && !this.ended ? this.api : undefined;
  }

  /**
   * Ends the handler's use of an open transaction and hands its connection over, for the
   * completion to commit on; the taker must `release` it. Undefined when none is open.
   */
  take(): pg.PoolClient | undefined {
    const c = this.conn;
    if (!c || this.ended) return undefined;
    this.ended = true;
    this.conn = undefined;
    if (this.beginDeferred) this.sendBegin(c);
    return c;
  }

  /**
   * Sends BEGIN on a pipelined connection without waiting for its answer (kept in `begin`), and
   * `next`'s query behind it in the same write (`corked`).
   */
  private sendBegin<T>(c: pg.PoolClient, next?: () => T): T | undefined {
    this.beginDeferred = false;
    return corked(c, () => {
      const begin = c.query('BEGIN').then(() => undefined);
      // Awaited by the handler's queries and the completion; a failure is reported there.
      begin.catch(() => {});
      this.begin = begin;
      return next?.();
    });
  }

  /**
   * Commits the taken transaction after `statement` (the completion). On a pipelined connection
   * the COMMIT goes out in the same write, not waiting for the statement's answer: a round trip
   * fewer. So the statement must fail, not return an empty result, whenever the COMMIT must not
   * go through: a failed statement aborts the transaction and the COMMIT behind it rolls back.
   * Elsewhere the COMMIT is sent once the statement succeeded.
   * @param sent told when the COMMIT went out: from then on a lost connection leaves the
   * outcome unknown.
   * @returns the statement's result, once the COMMIT was answered.
   * @throws the statement's error (after the COMMIT's answer, on a pipelined connection: the
   * transaction is over and the connection clean then), else the COMMIT's.
   */
  async commitWith<T>(c: pg.PoolClient, statement: () => Promise<T>, sent: () => void): Promise<T> {
    if (!c.pipeline) {
      const r = await statement();
      sent();
      await c.query('COMMIT');
      return r;
    }
    const [result, commit] = corked(c, () => [statement(), c.query('COMMIT')] as const);
    sent();
    const [r, committed] = await Promise.allSettled([result, commit]);
    if (r.status === 'rejected') {
      // The COMMIT rolled back (or the connection is gone); a failed COMMIT is the one to report
      // then, so that the connection is not given back.
      if (committed.status === 'rejected') throw committed.reason;
      throw r.reason;
    }
    if (committed.status === 'rejected') throw committed.reason;
    return r.value;
  }

  /**
   * Resolves once the transaction's BEGIN went through (at once unless it was pipelined); the
   * completion waits for it, so that it never runs outside the transaction.
   * @throws the BEGIN's error.
   */
  began(): Promise<void> {
    return this.begin ?? Promise.resolve();
  }

  /** Returns a connection to the pool, destroyed when `err` is given. */
  release(c: pg.PoolClient, err?: unknown): void {
    if (this.onError) c.removeListener('error', this.onError);
    c.release(err === undefined ? undefined : (err as Error));
  }

  /**
   * True once the handler asked for the transaction (`open`), whether or not it opened: only
   * then has `close` anything to wait for.
   */
  get requested(): boolean {
    return this.opening !== undefined;
  }

  /** Ends an attempt that never asked for the transaction: later opens are refused. */
  end(): void {
    this.ended = true;
  }

  /** Ends the transaction: refuses further handler queries, rolls back, releases. */
  async close(): Promise<void> {
    this.ended = true;
    if (!this.opening) return;
    const opened = await this.opening.then(
      () => true,
      () => false,
    );
    if (!opened || !this.conn) return;
    const c = this.conn;
    this.conn = undefined;
    if (this.beginDeferred) {
      // Nothing was sent on it: no transaction to roll back.
      this.beginDeferred = false;
      this.release(c);
      return;
    }
    if (this.busy > 0) {
      // A handler query is still running (a lock wait, a slow statement): a ROLLBACK would queue
      // behind it. Cancel it and drop the connection; the server rolls the transaction back.
      // Dropped only once the cancel was taken: behind PgBouncer a client gone first takes its
      // link to the server connection along, and the cancel would find nothing to forward to.
      if (!(await cancelStatement(c))) {
        this.log.warn({}, 'could not cancel the completionTx query still running');
      }
      this.release(c, new Error('the attempt ended while a completionTx query was running'));
      return;
    }
    try {
      await c.query('ROLLBACK');
      this.release(c);
    } catch (err) {
      this.release(c, err);
    }
  }

  private leaseLost(): LeaseLostError {
    return new LeaseLostError(this.step.runId, this.step.node, this.step.attempt);
  }
}

/**
 * Runs `send`, whose queries go out in one write: the connection's socket is corked around it
 * (pg corks each query's messages the same way, query.js `submit`). Queries are sent at once
 * only on a pipelined connection; elsewhere pg queues them and this changes nothing.
 */
function corked<T>(c: pg.PoolClient, send: () => T): T {
  const stream = (c as unknown as { connection?: { stream?: Partial<Writable> } }).connection
    ?.stream;
  stream?.cork?.();
  try {
    return send();
  } finally {
    stream?.uncork?.();
  }
}
