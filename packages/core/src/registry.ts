/**
 * The worker registry: a worker's row in `cyclone_workers` (who runs, where, with what capacity
 * and load), written at start, refreshed every few seconds, deleted at a graceful stop; and the
 * throughput counts, step outcomes per minute and workflow counted in memory and added to
 * `cyclone_throughput` by the same refresh. One statement per interval, none per step: the
 * operator UI's health page and throughput chart read these small tables instead of the runs.
 * Workers on one caller-given pool report together (`RegistryGroup`): one statement per interval
 * upserts each one's own row and adds their counts summed.
 */
import { readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import type pg from 'pg';
import { isConnectionError } from './db.js';
import { ConfigError } from './errors.js';
import type { Logger } from './logger.js';
import { PerPool } from './per-pool.js';
import { every, type Periodic } from './periodic.js';
import type { Recorded } from './recorded.js';
import {
  removeWorker,
  reportWorker,
  reportWorkers,
  type ThroughputCount,
  type WorkersReport,
} from './sql/registry.js';
import type { SqlScope } from './sql/statement.js';

/** Configuration of the registry. Durations in ms. */
export interface RegistryConfig {
  /** The worker's id (its lease owner). */
  workerId: string;
  /** The worker's `concurrency`. */
  concurrency: number;
  /** The workflows it runs. */
  workflows: readonly string[];
  /** Between refreshes (the row's `last_seen_at`, the counts flushed). Default 5,000. */
  intervalMs?: number;
  /**
   * Rows of other workers not refreshed for this long are deleted (their worker died). Default
   * 12 intervals, at least 60,000: far beyond a refresh delayed by a busy database.
   */
  staleAfterMs?: number;
  /** Throughput buckets older than this are deleted. Default 7 days. */
  keepThroughputMs?: number;
}

/** What the registry needs of its worker. */
export interface RegistryParts {
  /** The control pool; never held by handlers. */
  pool: pg.Pool;
  db: SqlScope;
  log: Logger;
  /** Steps the worker holds now. */
  inFlight(): number;
  /**
   * The report shared with the other workers on a caller-given pool (`registryGroup`); undefined
   * for a worker with its own pools, which reports on its own.
   */
  group?: RegistryGroup;
}

/** What one refresh did. */
export interface RegistryResult {
  /** (minute, workflow) buckets added to. */
  flushed: number;
  /** Rows of dead workers deleted. */
  pruned: number;
}

const MINUTE_MS = 60_000;
const WEEK_MS = 7 * 24 * 3_600_000;

/** The worker registry and throughput counts, as a service: `start()`, `stop()`, `runOnce()`. */
export class Registry {
  readonly intervalMs: number;
  readonly staleAfterMs: number;
  readonly keepThroughputMs: number;
  private counts = new Map<string, ThroughputCount>();
  private task: Periodic | undefined;
  /** The refresh in flight, so that refreshes (periodic, start, stop) never overlap. */
  private last: Promise<unknown> = Promise.resolve();
  private starting = true;

  /** @throws ConfigError on an interval or age that is not a positive number. */
  constructor(
    private readonly parts: RegistryParts,
    private readonly config: RegistryConfig,
  ) {
    const t = times(config);
    this.intervalMs = t.intervalMs;
    this.staleAfterMs = t.staleAfterMs;
    this.keepThroughputMs = t.keepThroughputMs;
    for (const [name, v] of [
      ['intervalMs', this.intervalMs],
      ['staleAfterMs', this.staleAfterMs],
      ['keepThroughputMs', this.keepThroughputMs],
    ] as const) {
      if (!(Number.isFinite(v) && v > 0)) {
        throw new ConfigError(`registry ${name} must be a positive number, got ${v}`);
      }
    }
  }

  /**
   * Counts one recorded outcome in memory (no I/O): `completed` and `skipped` as completed,
   * `retryable` and `discarded` as failed (and `discarded` also as discarded); other outcomes
   * (snoozed, lease lost, unrecorded) are not counted.
   */
  count(workflow: string, recorded: Recorded): void {
    const o = recorded.outcome;
    const done = o === 'completed' || o === 'skipped';
    const failed = o === 'retryable' || o === 'discarded';
    if (!done && !failed) return;
    const minute = Math.floor(Date.now() / MINUTE_MS) * MINUTE_MS;
    const key = `${minute}\u0000${workflow}`;
    let c = this.counts.get(key);
    if (c === undefined) {
      c = { minute, workflow, completed: 0, failed: 0, discarded: 0 };
      this.counts.set(key, c);
    }
    if (done) c.completed++;
    else {
      c.failed++;
      if (o === 'discarded') c.discarded++;
    }
  }

  /**
   * Registers the worker (its row inserted, or refreshed with a new start time), then refreshes
   * every `intervalMs` until `stop()`. A failed registration is logged and left to the next
   * refresh: the worker runs without its row meanwhile.
   */
  async start(): Promise<void> {
    const { group } = this.parts;
    if (group) return group.join(this);
    if (this.task) return;
    this.task = every(this.intervalMs, 0.1, () => this.refresh(), this.parts.log);
    await this.refresh();
  }

  /**
   * Stops refreshing, flushes the last counts and deletes the worker's row. Failures are logged:
   * the row is then deleted by another worker once stale.
   */
  async stop(): Promise<void> {
    this.task?.stop();
    this.task = undefined;
    // The group's report in flight may still upsert this row: it goes before the removal.
    await this.parts.group?.leave(this);
    await this.refresh();
    const removed = this.last.then(() =>
      removeWorker(this.parts.pool, this.parts.db, this.workerId),
    );
    this.last = removed.catch(() => {});
    try {
      await removed;
    } catch (err) {
      this.parts.log.warn({ err: String(err) }, 'could not remove the worker from the registry');
    }
  }

  /**
   * One refresh: the worker's row (`last_seen_at`, steps in flight), the counts since the last
   * refresh added, dead workers' rows and old buckets deleted, in one statement. Counts whose
   * statement failed are kept for the next refresh (counted twice only if a commit went through
   * and its answer was lost: acceptable for a chart). Waits for a refresh in flight first.
   * @throws the statement's error.
   */
  runOnce(): Promise<RegistryResult> {
    const next = this.last.then(() => this.send());
    this.last = next.catch(() => {});
    return next;
  }

  private get workerId(): string {
    return this.config.workerId;
  }

  /** This worker's part of a group's report: its row, and its counts, taken (`restore`). */
  member(): { worker: WorkersReport['workers'][number]; taken: Map<string, ThroughputCount> } {
    const taken = this.counts;
    this.counts = new Map();
    const { config } = this;
    return {
      worker: {
        workerId: config.workerId,
        concurrency: config.concurrency,
        inFlight: this.parts.inFlight(),
        workflows: config.workflows,
        starting: this.starting,
      },
      taken,
    };
  }

  /** After a group's report: its row started, or its counts given back for the next report. */
  reported(taken: Map<string, ThroughputCount>, ok: boolean): void {
    if (ok) this.starting = false;
    else this.restore(taken);
  }

  private restore(taken: Map<string, ThroughputCount>): void {
    addCounts(this.counts, taken);
  }

  private async send(): Promise<RegistryResult> {
    const taken = this.counts;
    this.counts = new Map();
    const counts = sorted(taken.values());
    try {
      const pruned = await reportWorker(this.parts.pool, this.parts.db, {
        workerId: this.workerId,
        host: hostname(),
        pid: process.pid,
        version: coreVersion(),
        concurrency: this.config.concurrency,
        inFlight: this.parts.inFlight(),
        workflows: this.config.workflows,
        staleAfterMs: this.staleAfterMs,
        counts,
        keepThroughputMs: this.keepThroughputMs,
        starting: this.starting,
      });
      this.starting = false;
      return { flushed: counts.length, pruned };
    } catch (err) {
      this.restore(taken);
      throw err;
    }
  }

  private async refresh(): Promise<void> {
    try {
      await this.runOnce();
    } catch (err) {
      this.parts.log.warn(
        { err: String(err), connection: isConnectionError(err) },
        'worker registry refresh failed; will retry',
      );
    }
  }
}

/**
 * Adds the counts of `from` into `into`, by key (minute and workflow); a key new to `into` gets a
 * copy, so `from`'s counts are never changed through it.
 */
function addCounts(into: Map<string, ThroughputCount>, from: Map<string, ThroughputCount>): void {
  for (const [key, c] of from) {
    const now = into.get(key);
    if (now === undefined) into.set(key, { ...c });
    else {
      now.completed += c.completed;
      now.failed += c.failed;
      now.discarded += c.discarded;
    }
  }
}

/** Counts by minute, then workflow: the order every report adds them in. */
function sorted(counts: Iterable<ThroughputCount>): ThroughputCount[] {
  return [...counts].sort((a, b) => a.minute - b.minute || (a.workflow < b.workflow ? -1 : 1));
}

/** The intervals and ages of a registry, defaults applied (`RegistryConfig`). */
function times(config: Pick<RegistryConfig, 'intervalMs' | 'staleAfterMs' | 'keepThroughputMs'>) {
  const intervalMs = config.intervalMs ?? 5_000;
  return {
    intervalMs,
    staleAfterMs: config.staleAfterMs ?? Math.max(60_000, 12 * intervalMs),
    keepThroughputMs: config.keepThroughputMs ?? WEEK_MS,
  };
}

/**
 * The registry of the workers on one caller-given pool with the same intervals: one statement per
 * interval reports them all (`reportWorkers`): each one's own row (id, capacity, steps in flight,
 * workflows, last seen) and their counts summed per minute and workflow, instead of one statement
 * per worker adding to the same throughput rows. It reports while at least one of them runs:
 * started by the first to join, stopped when the last leaves. A worker's stop still flushes its
 * last counts and deletes its row on its own.
 */
export class RegistryGroup {
  private readonly members = new Set<Registry>();
  private task: Periodic | undefined;
  /** The report in flight, so that reports never overlap. */
  private last: Promise<unknown> = Promise.resolve();
  /** A report queued behind the one in flight: workers joining meanwhile share it. */
  private queued: Promise<void> | undefined;

  constructor(
    private readonly pool: pg.Pool,
    private readonly db: SqlScope,
    private readonly log: Logger,
    readonly intervalMs: number,
    readonly staleAfterMs: number,
    readonly keepThroughputMs: number,
  ) {}

  /**
   * Adds a worker; the first one starts the reports. Resolves once a report including it settled
   * (a failure is logged: the next report registers it).
   */
  join(r: Registry): Promise<void> {
    this.members.add(r);
    this.task ??= every(this.intervalMs, 0.1, () => this.refresh(), this.log);
    return this.refresh();
  }

  /**
   * Removes a worker; the last one stops the reports. Resolves once no report in flight includes
   * it any more.
   */
  async leave(r: Registry): Promise<void> {
    if (this.members.delete(r) && this.members.size === 0) {
      this.task?.stop();
      this.task = undefined;
    }
    await this.last;
  }

  /** One report of every member, after the one in flight (joined if one is already queued). */
  private refresh(): Promise<void> {
    if (this.queued) return this.queued;
    const next = this.last.then(() => {
      this.queued = undefined;
      return this.send();
    });
    const settled = next.catch((err) => {
      this.log.warn(
        { err: String(err), connection: isConnectionError(err) },
        'worker registry refresh failed; will retry',
      );
    });
    this.queued = settled;
    this.last = settled;
    return settled;
  }

  private async send(): Promise<void> {
    if (this.members.size === 0) return;
    const parts = [...this.members].map((m) => ({ m, ...m.member() }));
    const sum = new Map<string, ThroughputCount>();
    for (const { taken } of parts) addCounts(sum, taken);
    // One row per id: an upsert cannot touch a row twice, and two workers given one id share it.
    const rows = new Map<string, WorkersReport['workers'][number]>();
    for (const { worker } of parts) {
      const first = rows.get(worker.workerId);
      if (first === undefined) rows.set(worker.workerId, worker);
      else if (worker.starting) rows.set(worker.workerId, { ...first, starting: true });
    }
    let ok = false;
    try {
      await reportWorkers(this.pool, this.db, {
        host: hostname(),
        pid: process.pid,
        version: coreVersion(),
        workers: [...rows.values()],
        staleAfterMs: this.staleAfterMs,
        counts: sorted(sum.values()),
        keepThroughputMs: this.keepThroughputMs,
      });
      ok = true;
    } finally {
      for (const p of parts) p.m.reported(p.taken, ok);
    }
  }
}

/** The registry groups of caller-given pools, by pool, then schema and intervals. */
const groups = new PerPool<string, RegistryGroup>();

/**
 * The registry group of `pool` for `db` and the intervals of `config` (defaults applied), shared
 * by the workers on that pool with those settings (workers of one `Client` made with a
 * caller-given pool).
 */
export function registryGroup(
  pool: pg.Pool,
  db: SqlScope,
  log: Logger,
  config: Pick<RegistryConfig, 'intervalMs' | 'staleAfterMs' | 'keepThroughputMs'> = {},
): RegistryGroup {
  const t = times(config);
  const key = [db.q, db.prepare, t.intervalMs, t.staleAfterMs, t.keepThroughputMs].join('\u0000');
  return groups.get(
    pool,
    key,
    () => new RegistryGroup(pool, db, log, t.intervalMs, t.staleAfterMs, t.keepThroughputMs),
  );
}

let version: string | null | undefined;

/** `@cyclone/core`'s version, from its package.json (src/ and dist/ are one level below it). */
export function coreVersion(): string | null {
  if (version === undefined) {
    try {
      const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'));
      version = typeof pkg.version === 'string' ? pkg.version : null;
    } catch {
      version = null;
    }
  }
  return version ?? null;
}
