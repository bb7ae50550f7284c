/**
 * `ctx.completionTx()`: the transaction a handler opens on demand so that its writes commit
 * together with the step's `completed` transition. It is opened on the first call, its queries
 * are refused once the attempt ended, and it is either handed to the completion (`take`) or
 * closed: rolled back, or cancelled when a handler query is still running on it.
 */
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
  /** The connection with the open transaction, once BEGIN went through. */
  private conn: pg.PoolClient | undefined;
  private opening: Promise<Tx> | undefined;
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
   * connection); later calls return the same one.
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
            return (await c.query(text, values)) as never;
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
    return c;
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
