/**
 * What the harness needs from each system under test. One module per system implements it
 * (cyclone.ts, graphile-worker.ts, pg-boss.ts): the producer side runs in the harness process,
 * the worker side in a child process (child.ts), which imports only its own system's module.
 */
import type pg from 'pg';

export type SystemName = 'cyclone' | 'graphile-worker' | 'pg-boss';
export const SYSTEM_NAMES: readonly SystemName[] = ['cyclone', 'graphile-worker', 'pg-boss'];

/**
 * What a job does.
 * - `noop`: nothing (a single-node run for Cyclone).
 * - `dag`: a 10-node DAG, fan-out 8, fan-in 1 (Cyclone natively; the peers emulate it with
 *   jobs that enqueue jobs and a counter row for the join: 10 jobs per run).
 * - `write`: writes one row to `bench_rows` (Cyclone: on `ctx.completionTx()`; the peers: in
 *   the job's own transaction, as is idiomatic for each).
 */
export type Workload = 'noop' | 'dag' | 'write' | FlowWorkload;

/**
 * Cyclone only (rows 14–16, flow control): a no-op step of an action with a limit — `limited` a
 * concurrency limit of 100,000 (above any worker's concurrency), `keyed` 1 per key over 100 keys
 * (run i has key `k<i mod 100>`), `rate` a rate limit of 1,000 starts per second.
 */
export type FlowWorkload = 'limited' | 'keyed' | 'rate';

/** Jobs (peers) or steps (Cyclone) per enqueued unit of a workload. */
export const JOBS_PER_UNIT: Record<Workload, number> = {
  noop: 1,
  dag: 10,
  write: 1,
  limited: 1,
  keyed: 1,
  rate: 1,
};

/**
 * A named configuration: `default` (the system's own defaults), `tuned` (the throughput
 * settings a user would pick on this machine) and `short` (the shortest crash-recovery settings
 * the system offers, scenario 6).
 */
export type Variant = 'default' | 'tuned' | 'short';

/** What a system says about itself for the report. */
export interface SystemInfo {
  name: SystemName;
  version: string;
  /** One line per variant it supports: the options used. */
  variants: Partial<Record<Variant, string>>;
  /** Why a variant is not offered, when it is not (e.g. no configurable lock timeout). */
  missing?: Partial<Record<Variant, string>>;
  /** Crash recovery with the defaults, from the system's own constants (scenario 6). */
  defaultRecovery: string;
  /**
   * Poll interval (ms) of variants that pick up new jobs by polling only (no LISTEN/NOTIFY):
   * scenario 5 then enqueues at a random point of it, not right after a poll.
   */
  pollOnlyMs?: Partial<Record<Variant, number>>;
}

/** Enqueues work through the system's public API. */
export interface Producer {
  /**
   * Enqueues `count` units of `workload` through the fastest public path: one bulk call per
   * 1,000 jobs where the system has a bulk API, else single submits with 10 in flight.
   */
  bulk(workload: Workload, count: number): Promise<void>;
  /** Enqueues one unit through the plain single-job API. */
  one(workload: Workload, payload: Record<string, unknown>): Promise<void>;
  close(): Promise<void>;
}

/** A worker running in the child process. */
export interface RunningWorker {
  /**
   * Jobs (steps) whose completion is known to be committed, when the system reports it;
   * otherwise the child polls `pending()`.
   */
  completed?(): number;
  /** Jobs not yet completed in the database (cheap, indexed query). */
  pending?(): Promise<number>;
  stop(): Promise<void>;
}

export interface WorkerSpec {
  url: string;
  variant: Variant;
  workload: Workload;
  /** Largest job id before the measured jobs were enqueued (graphile-worker's pending check). */
  idFloor?: string;
  /** Cyclone only (row 12): overrides of the variant. */
  cyclone?: {
    /** Also run the signal row's workflow (`waitFlow`). */
    waitFlow?: boolean;
    /** Handlers at once, instead of the variant's. */
    concurrency?: number;
    /** Row 18: workers in this process (default 1), each with `concurrency`. */
    workers?: number;
    /**
     * Row 18: one pool of this many connections for the process's client, shared by its
     * workers (a caller-given pool), instead of each worker's own pools.
     */
    sharedPoolSize?: number;
    /** LISTEN for NOTIFY (default the variant's: on). */
    listen?: boolean;
    /** Poll interval, ms (default the variant's). */
    pollIntervalMs?: number;
  };
}

/** The system's module. */
export interface System {
  info(): SystemInfo;
  /** Installs the system's schema and queues into an empty database. */
  install(url: string): Promise<void>;
  /** A producer on `url` (the variant matters where job options come from the producer). */
  producer(url: string, variant: Variant): Promise<Producer>;
  /** Inserts `count` finished no-op jobs/runs with set-based SQL (scenario 7). */
  insertHistory(pool: pg.Pool, count: number): Promise<string>;
  /** The current id floor for `WorkerSpec.idFloor` (only graphile-worker needs one). */
  idFloor?(pool: pg.Pool): Promise<string>;
  /** Starts a worker (child process side). */
  startWorker(spec: WorkerSpec): Promise<RunningWorker>;
}

/** Tables the harness adds to every database (the `write` and `dag` workloads use them). */
export const BENCH_TABLES_SQL = `
CREATE TABLE IF NOT EXISTS public.bench_rows (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  k  text NOT NULL,
  at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS public.bench_dag (
  run       text PRIMARY KEY,
  remaining int  NOT NULL
);`;
