/**
 * The heartbeat: keeps the leases of every step a worker holds alive with one statement per
 * interval (lease/3 by default, so two beats can fail before a lease lapses), and tells the
 * handlers of steps whose lease was found lost.
 */
import type pg from 'pg';
import { isConnectionError } from './db.js';
import { ConfigError } from './errors.js';
import type { Logger } from './logger.js';
import { every, type Periodic } from './periodic.js';
import { extendLeases } from './sql/heartbeat.js';
import type { SqlScope } from './sql/statement.js';

/** Configuration of the heartbeat. Durations in ms. */
export interface HeartbeatConfig {
  /** The lease owner: the worker's id. */
  workerId: string;
  /** The lease each beat extends to, from now. Default 5,000. */
  leaseMs?: number;
  /** Between beats. Default leaseMs / 3. */
  intervalMs?: number;
}

/** A step the heartbeat keeps alive (the worker's in-flight step handle). */
export interface HeldStep {
  readonly runId: string;
  readonly node: string;
  /** The claim's attempt, its fencing token. */
  readonly attempt: number;
  /**
   * True once the handler settled and the outcome is being recorded: its lease is still
   * extended (a slow completion must not lose it), but a lost lease is left to the completion,
   * whose fence decides.
   */
  readonly finishing: boolean;
}

/** What the heartbeat needs of its worker. */
export interface HeartbeatParts<S extends HeldStep> {
  /** The control pool; never held by handlers. */
  pool: pg.Pool;
  db: SqlScope;
  log: Logger;
  /** The steps the worker holds now. */
  steps(): Iterable<S>;
  /** Told of each step (not finishing) whose lease is lost: abort its handler. */
  leaseLost(step: S): void;
}

/** What one beat did. */
export interface HeartbeatResult {
  /** Steps whose lease is held: extended, or locked right now and still running at our attempt. */
  extended: number;
  /** Steps found lost and reported through `leaseLost`. */
  lost: number;
}

/** The batched lease extension, as a service: `start()`, `stop()`, `runOnce()`. */
export class Heartbeat<S extends HeldStep> {
  readonly workerId: string;
  readonly leaseMs: number;
  readonly intervalMs: number;
  private task: Periodic | undefined;

  /** @throws ConfigError on a lease or interval that is not a positive number. */
  constructor(
    private readonly parts: HeartbeatParts<S>,
    config: HeartbeatConfig,
  ) {
    this.workerId = config.workerId;
    this.leaseMs = config.leaseMs ?? 5_000;
    this.intervalMs = config.intervalMs ?? this.leaseMs / 3;
    for (const [name, v] of [
      ['leaseMs', this.leaseMs],
      ['intervalMs', this.intervalMs],
    ] as const) {
      if (!(Number.isFinite(v) && v > 0)) {
        throw new ConfigError(`heartbeat ${name} must be a positive number, got ${v}`);
      }
    }
  }

  /** Beats every `intervalMs` until `stop()`. */
  start(): void {
    this.task ??= every(this.intervalMs, 0, () => this.beat(), this.parts.log);
  }

  /** Schedules no further beat (one in flight finishes). */
  stop(): void {
    this.task?.stop();
  }

  /**
   * One beat: extends the leases of all the worker's steps in one statement, including those
   * whose outcome waits to be recorded, and reports the lost ones.
   * @throws the statement's error (nothing is reported then).
   */
  async runOnce(): Promise<HeartbeatResult> {
    const batch = [...this.parts.steps()];
    if (batch.length === 0) return { extended: 0, lost: 0 };
    const rows = await extendLeases(this.parts.pool, this.parts.db, {
      steps: batch,
      owner: this.workerId,
      leaseMs: this.leaseMs,
    });
    const held = new Set(rows.map((r) => `${r.run_id}\u0000${r.node}\u0000${r.attempt}`));
    let lost = 0;
    for (const h of batch) {
      if (!held.has(`${h.runId}\u0000${h.node}\u0000${h.attempt}`) && !h.finishing) {
        lost++;
        this.parts.leaseLost(h);
      }
    }
    return { extended: rows.length, lost };
  }

  private async beat(): Promise<void> {
    try {
      await this.runOnce();
    } catch (err) {
      this.parts.log.warn(
        { err: String(err), connection: isConnectionError(err) },
        'heartbeat failed; will retry',
      );
    }
  }
}
