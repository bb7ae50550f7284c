/**
 * The worker registry: a worker's row in `cyclone_workers` (who runs, where, with what capacity
 * and load), written at start, refreshed every few seconds, deleted at a graceful stop; and the
 * throughput counts, step outcomes per minute and workflow counted in memory and added to
 * `cyclone_throughput` by the same refresh. One statement per interval, none per step: the
 * operator UI's health page and throughput chart read these small tables instead of the runs.
 */
import { readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import type pg from 'pg';
import { isConnectionError } from './db.js';
import { ConfigError } from './errors.js';
import type { Logger } from './logger.js';
import { every, type Periodic } from './periodic.js';
import type { Recorded } from './recorded.js';
import { removeWorker, reportWorker, type ThroughputCount } from './sql/registry.js';
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
    this.intervalMs = config.intervalMs ?? 5_000;
    this.staleAfterMs = config.staleAfterMs ?? Math.max(60_000, 12 * this.intervalMs);
    this.keepThroughputMs = config.keepThroughputMs ?? WEEK_MS;
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

  private async send(): Promise<RegistryResult> {
    const taken = this.counts;
    this.counts = new Map();
    const counts = [...taken.values()].sort(
      (a, b) => a.minute - b.minute || (a.workflow < b.workflow ? -1 : 1),
    );
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
      for (const [key, c] of taken) {
        const now = this.counts.get(key);
        if (now === undefined) this.counts.set(key, c);
        else {
          now.completed += c.completed;
          now.failed += c.failed;
          now.discarded += c.discarded;
        }
      }
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
