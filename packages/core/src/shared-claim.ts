/**
 * The plain claim shared by the workers on one caller-given pool: their requests, each of the
 * worker's free slots, go out together in one claim statement (`claimStepsShared`), which leases
 * each step it takes to one of them, never more than a worker asked for. A worker of concurrency
 * 10 claims at most 10 steps per statement; ten of them on one pool would send ten statements
 * where one does. Each step then belongs to its worker alone: its lease owner, heartbeat and
 * fencing token are that worker's, as with its own claim.
 *
 * A request asks for the worker's free slots as they are when its statement goes out, not when it
 * was queued: the slots its steps free while it waits behind the statement in flight go in the
 * same claim, instead of each in a claim of its own. And each statement waits one turn of the
 * event loop, so that the requests of the steps the last one started (which may have settled
 * already) go with it.
 */
import type pg from 'pg';
import { cancelStatement } from './cancel.js';
import { isLimitExceeded, withConnection } from './db.js';
import { PerPool } from './per-pool.js';
import { type ClaimedStep, claimStepsShared } from './sql/claim.js';
import type { SqlScope } from './sql/statement.js';

/** A worker's request: up to `slots()` steps for `workerId`, while `isRunning()`. */
interface Request {
  workerId: string;
  /** The worker's free slots, read when the statement is made. */
  slots: () => number;
  /** What `slots()` gave for this statement. */
  asked: number;
  isRunning: () => boolean;
  onLimit: (err: unknown) => void;
  resolve: (claimed: SharedClaimResult) => void;
  reject: (err: unknown) => void;
}

/** What a worker's request got. */
export interface SharedClaimResult {
  /** The steps leased to the worker. */
  rows: ClaimedStep[];
  /** The slots asked for: fewer rows than this means no more steps were claimable. */
  asked: number;
}

/** What one shared claim serves: the same pool, schema, lease, workflows and nodes. */
export interface SharedClaimConfig {
  pool: pg.Pool;
  db: SqlScope;
  leaseMs: number;
  workflows: string[];
  nodeKeys: string[];
}

/**
 * One claim statement at a time for every worker that asks; the requests that arrive while it
 * runs go out together in the next one.
 */
export class SharedClaim {
  private queue: Request[] = [];
  private flushing = false;
  /** The workers of the statement in flight, and its connection (for `cancel`). */
  private current: { workerIds: Set<string>; conn: pg.ClientBase | undefined } | undefined;

  constructor(private readonly config: SharedClaimConfig) {}

  /**
   * Up to `slots()` steps leased to `workerId` (read when the statement is made, so the slots
   * freed meanwhile count), claimed with the other workers' requests in one statement. A worker
   * that no longer runs when the statement is made gets none.
   * @throws the claim statement's error (every worker of that statement gets it).
   * @param onLimit called (for the first worker of the statement) before the statement is sent again without the upstream outputs
   *   (`claimStepsWithoutUpstream`), when it failed on a size limit of PostgreSQL's.
   */
  claim(
    workerId: string,
    slots: () => number,
    isRunning: () => boolean,
    onLimit: (err: unknown) => void,
  ): Promise<SharedClaimResult> {
    return new Promise((resolve, reject) => {
      this.queue.push({ workerId, slots, asked: 0, isRunning, onLimit, resolve, reject });
      if (!this.flushing) {
        this.flushing = true;
        void this.flush();
      }
    });
  }

  /**
   * The next due time as `read` gives it, or as the read already in flight for another worker
   * gives it: workers whose claims came back short together need one read between them, not one
   * each. A read in flight that began at or before `notBefore` (`performance.now()` of the
   * caller's last wake) is not joined: its snapshot may predate the step that woke the caller.
   */
  nextDue(
    read: () => Promise<number | undefined>,
    notBefore = Number.NEGATIVE_INFINITY,
  ): Promise<number | undefined> {
    const cur = this.dueRead;
    if (cur && cur.startedAt > notBefore) return cur.result;
    const startedAt = performance.now();
    const p = read().finally(() => {
      if (this.dueRead?.result === p) this.dueRead = undefined;
    });
    this.dueRead = { startedAt, result: p };
    return p;
  }

  /** The next-due read in flight, if any (`nextDue`), and when it began. */
  private dueRead: { startedAt: number; result: Promise<number | undefined> } | undefined;

  /**
   * Cancels the claim statement in flight if it claims for `workerId` (`ClaimLoop.cancel`); the
   * other workers of that statement get its error and claim again.
   * @returns false when a statement for the worker was in flight and could not be cancelled.
   */
  async cancel(workerId: string): Promise<boolean> {
    const cur = this.current;
    if (!cur?.conn || !cur.workerIds.has(workerId)) return true;
    return cancelStatement(cur.conn);
  }

  /** Sends the queued requests as one statement, then the ones that came meanwhile. */
  private async flush(): Promise<void> {
    while (this.queue.length > 0) {
      // A turn of the event loop first, so that the workers woken by one NOTIFY, and those whose
      // steps the last statement started and which settled since, ask together.
      await new Promise<void>((r) => setImmediate(r));
      const batch = this.queue;
      this.queue = [];
      const live: Request[] = [];
      const ids = new Set<string>();
      const later: Request[] = [];
      for (const r of batch) {
        // The rows are handed out by lease owner: two workers given the same workerId in one
        // statement would both get every row leased to it, and run it twice. One goes next time.
        if (ids.has(r.workerId)) {
          later.push(r);
          continue;
        }
        r.asked = r.isRunning() ? r.slots() : 0;
        // A stopping worker is handed nothing new.
        if (!(r.asked > 0)) r.resolve({ rows: [], asked: r.asked });
        else {
          ids.add(r.workerId);
          live.push(r);
        }
      }
      if (later.length > 0) this.queue = later.concat(this.queue);
      if (live.length === 0) continue;
      try {
        const rows = await this.send(live);
        const byWorker = new Map<string, ClaimedStep[]>();
        for (const row of rows) {
          const owner = row.lease_owner as string;
          const list = byWorker.get(owner);
          if (list) list.push(row);
          else byWorker.set(owner, [row]);
        }
        for (const r of live) r.resolve({ rows: byWorker.get(r.workerId) ?? [], asked: r.asked });
      } catch (err) {
        for (const r of live) r.reject(err);
      }
    }
    this.flushing = false;
  }

  private send(live: readonly Request[]): Promise<ClaimedStep[]> {
    const { pool, db, leaseMs, workflows, nodeKeys } = this.config;
    const workerIds = live.map((r) => r.workerId);
    const params = { workflows, workerIds, slots: live.map((r) => r.asked), leaseMs, nodeKeys };
    return withConnection(pool, async (c) => {
      this.current = { workerIds: new Set(workerIds), conn: c };
      try {
        return await claimStepsShared(c, db, params);
      } catch (err) {
        if (!isLimitExceeded(err)) throw err;
        live[0]?.onLimit(err);
        return await claimStepsShared(c, db, { ...params, withoutUpstream: true });
      } finally {
        this.current = undefined;
      }
    });
  }
}

/** The shared claims of caller-given pools, by pool, then schema, lease and nodes. */
const claims = new PerPool<string, SharedClaim>();

/**
 * The claim shared by the workers on `config.pool` with the same schema, lease and nodes
 * (workers of one `Client` made with a caller-given pool).
 */
export function sharedClaim(config: SharedClaimConfig): SharedClaim {
  const key = [
    config.db.q,
    config.db.prepare,
    config.leaseMs,
    [...config.workflows].sort().join(','),
    [...config.nodeKeys].sort().join(','),
  ].join('\u0000');
  return claims.get(config.pool, key, () => new SharedClaim(config));
}
