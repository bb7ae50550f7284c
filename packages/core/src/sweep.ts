/**
 * The recovery sweep: moves steps whose lease expired (their worker died, stalled or lost its
 * connection) back to `retryable`, or to `discarded` when their attempts are used up. Every
 * worker runs it, with no leader: the statement skips rows another sweep has locked.
 */
import type pg from 'pg';
import { ConfigError } from './errors.js';
import type { Logger } from './logger.js';
import { every, type Periodic } from './periodic.js';
import type { SqlScope } from './sql/statement.js';
import { type SweptStep, sweepExpiredLeases } from './sql/sweep.js';

/** Configuration of the sweep. Durations in ms. */
export interface SweepConfig {
  /** Between sweeps, ± 20 % so that workers started together drift apart. Default 1,000. */
  intervalMs?: number;
  /** Most steps one statement moves. Default 1,000. */
  batchSize?: number;
  /** Most statements one sweep sends while full batches come back. Default 10. */
  maxBatches?: number;
}

/** What the sweep needs of its worker. */
export interface SweepParts {
  /** The control pool; never held by handlers. */
  pool: pg.Pool;
  db: SqlScope;
  log: Logger;
  /** Told of every batch moved (the worker counts them in `stats.swept`). */
  swept?(steps: readonly SweptStep[]): void;
}

/** What one sweep did. */
export interface SweepResult {
  /** Steps moved, whatever their new state. */
  swept: number;
  /** Of those, steps discarded (attempts used up). */
  discarded: number;
}

/** The recovery sweep, as a service: `start()`, `stop()`, `runOnce()`. */
export class Sweep {
  readonly intervalMs: number;
  readonly batchSize: number;
  readonly maxBatches: number;
  private task: Periodic | undefined;
  private stopped = false;

  /** @throws ConfigError on an interval that is not a positive number. */
  constructor(
    private readonly parts: SweepParts,
    config: SweepConfig = {},
  ) {
    this.intervalMs = config.intervalMs ?? 1_000;
    this.batchSize = config.batchSize ?? 1_000;
    this.maxBatches = config.maxBatches ?? 10;
    if (!(Number.isFinite(this.intervalMs) && this.intervalMs > 0)) {
      throw new ConfigError(`sweep intervalMs must be a positive number, got ${this.intervalMs}`);
    }
  }

  /** Sweeps every `intervalMs` (jittered) until `stop()`. */
  start(): void {
    this.task ??= every(this.intervalMs, 0.2, () => this.sweep(), this.parts.log);
  }

  /** Schedules no further sweep; one in flight sends no further batch. */
  stop(): void {
    this.stopped = true;
    this.task?.stop();
  }

  /**
   * One sweep: batches of up to `batchSize` expired leases, until a batch comes back short (or
   * `maxBatches` were sent, or the sweep was stopped). Each step moved is logged.
   * @throws a statement's error; the batches before it stay moved (and reported to `swept`).
   */
  async runOnce(): Promise<SweepResult> {
    const result: SweepResult = { swept: 0, discarded: 0 };
    for (let i = 0; i < this.maxBatches && !this.stopped; i++) {
      const rows = await sweepExpiredLeases(this.parts.pool, this.parts.db, {
        limit: this.batchSize,
      });
      this.parts.swept?.(rows);
      result.swept += rows.length;
      for (const r of rows) {
        if (r.state === 'discarded') result.discarded++;
        this.parts.log.warn(
          { runId: r.run_id, node: r.node, attempt: r.attempt, state: r.state },
          'lease expired: step recovered by the sweep',
        );
      }
      if (rows.length < this.batchSize) break;
    }
    return result;
  }

  private async sweep(): Promise<void> {
    try {
      await this.runOnce();
    } catch (err) {
      this.parts.log.warn({ err: String(err) }, 'recovery sweep failed; will retry');
    }
  }
}
