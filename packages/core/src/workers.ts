/**
 * `Client.listWorkers`: the workers registered in `cyclone_workers` (each Worker writes its row
 * at start, refreshes it every few seconds and deletes it at a graceful stop; `registry.ts`).
 */
import type { Db } from './db.js';
import * as registrySql from './sql/registry.js';

/**
 * A worker seen within this long (ms) is `alive`: three refreshes at the default 5 s interval,
 * so one or two delayed refreshes do not flap it.
 */
export const WORKER_ALIVE_WITHIN_MS = 15_000;

/** A registered worker, as `Client.listWorkers` returns it. Times are PostgreSQL's. */
export interface WorkerInfo {
  /** The worker's id, the lease owner of the steps it claims. */
  workerId: string;
  /** Host name of its machine (`os.hostname()`). */
  host: string;
  /** Its process id on that host. */
  pid: number;
  /** Its `@cyclone/core` version; null when unknown. */
  version: string | null;
  /** When it started. */
  startedAt: Date;
  /** Its last refresh (every 5 s while it runs). */
  lastSeenAt: Date;
  /** Its `concurrency`: most handlers run at once. */
  concurrency: number;
  /** Steps it held at its last refresh (running, or their outcome being recorded). */
  inFlight: number;
  /** The workflows it runs. */
  workflows: string[];
  /**
   * Seen within the last 15 s (`WORKER_ALIVE_WITHIN_MS`). A worker that died without a graceful
   * stop stays listed, not alive, until another worker's refresh deletes its row (after a minute).
   */
  alive: boolean;
}

/** `Client.listWorkers`: one statement on the small workers table. */
export async function listWorkers(db: Db): Promise<WorkerInfo[]> {
  const rows = await registrySql.listWorkers(db.pool, db, WORKER_ALIVE_WITHIN_MS);
  return rows.map((r) => ({
    workerId: r.worker_id,
    host: r.host,
    pid: r.pid,
    version: r.version,
    startedAt: new Date(r.started_at),
    lastSeenAt: new Date(r.last_seen_at),
    concurrency: r.concurrency,
    inFlight: r.in_flight,
    workflows: r.workflows,
    alive: r.alive,
  }));
}
