/**
 * The heartbeat: keeps the leases of every step a worker holds alive with one statement per
 * interval (lease/3 by default, so two beats can fail before a lease lapses), and tells the
 * handlers of steps whose lease was found lost. Workers on one caller-given pool with the same
 * lease and interval beat together (`HeartbeatGroup`): one statement per interval for all their
 * steps, each still extended only under its own worker's ownership and attempt.
 */
import type pg from 'pg';
import { isConnectionError } from './db.js';
import { ConfigError } from './errors.js';
import type { Logger } from './logger.js';
import { PerPool } from './per-pool.js';
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
  /**
   * The beat shared with the other workers on a caller-given pool (`heartbeatGroup`); undefined
   * for a worker with its own pools, which beats on its own.
   */
  group?: HeartbeatGroup;
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

  /** Beats every `intervalMs` until `stop()` (with its group, when it has one). */
  start(): void {
    const { group } = this.parts;
    if (group) group.join(this);
    else this.task ??= every(this.intervalMs, 0, () => this.beat(), this.parts.log);
  }

  /** Schedules no further beat (one in flight finishes). */
  stop(): void {
    this.parts.group?.leave(this);
    this.task?.stop();
  }

  /**
   * One beat of this worker alone: extends the leases of all its steps in one statement,
   * including those whose outcome waits to be recorded, and reports the lost ones.
   * @throws the statement's error (nothing is reported then).
   */
  runOnce(): Promise<HeartbeatResult> {
    return beat(this.parts.pool, this.parts.db, this.leaseMs, [this]);
  }

  /** The steps to extend now, and who is told of the lost ones (`beat`). */
  held(): { steps: HeldStep[]; leaseLost: (step: HeldStep) => void } {
    const { parts } = this;
    return { steps: [...parts.steps()], leaseLost: (step) => parts.leaseLost(step as S) };
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

/**
 * One statement extending the leases of every step of `members` (each under its own worker's
 * id), then each member told of its lost steps.
 * @returns the steps extended and lost, over all members.
 */
async function beat(
  pool: pg.Pool,
  db: SqlScope,
  leaseMs: number,
  members: Iterable<Heartbeat<HeldStep>>,
): Promise<HeartbeatResult> {
  const batches: { held: ReturnType<Heartbeat<HeldStep>['held']>; owner: string }[] = [];
  const steps: HeldStep[] = [];
  const owners: string[] = [];
  for (const m of members) {
    const held = m.held();
    if (held.steps.length === 0) continue;
    batches.push({ held, owner: m.workerId });
    for (const h of held.steps) {
      steps.push(h);
      owners.push(m.workerId);
    }
  }
  if (steps.length === 0) return { extended: 0, lost: 0 };
  const rows = await extendLeases(pool, db, { steps, owners, leaseMs });
  const kept = new Set(rows.map((r) => `${r.run_id}\u0000${r.node}\u0000${r.attempt}`));
  let lost = 0;
  for (const { held } of batches) {
    for (const h of held.steps) {
      if (!kept.has(`${h.runId}\u0000${h.node}\u0000${h.attempt}`) && !h.finishing) {
        lost++;
        held.leaseLost(h);
      }
    }
  }
  return { extended: rows.length, lost };
}

/**
 * The heartbeat of the workers on one caller-given pool with the same lease and interval: one
 * statement per interval extends all their steps (`beat`), instead of one per worker. It beats
 * while at least one of them runs: started by the first to join, stopped when the last leaves.
 */
export class HeartbeatGroup {
  private readonly members = new Set<Heartbeat<HeldStep>>();
  private task: Periodic | undefined;

  constructor(
    private readonly pool: pg.Pool,
    private readonly db: SqlScope,
    private readonly log: Logger,
    readonly leaseMs: number,
    readonly intervalMs: number,
  ) {}

  /** Adds a worker's heartbeat; the first one starts the beats. */
  join(h: Heartbeat<HeldStep>): void {
    this.members.add(h);
    this.task ??= every(this.intervalMs, 0, () => this.beatAll(), this.log);
  }

  /** Removes a worker's heartbeat; the last one stops the beats (one in flight finishes). */
  leave(h: Heartbeat<HeldStep>): void {
    if (!this.members.delete(h) || this.members.size > 0) return;
    this.task?.stop();
    this.task = undefined;
  }

  private async beatAll(): Promise<void> {
    try {
      await beat(this.pool, this.db, this.leaseMs, this.members);
    } catch (err) {
      this.log.warn(
        { err: String(err), connection: isConnectionError(err) },
        'heartbeat failed; will retry',
      );
    }
  }
}

/** The heartbeat groups of caller-given pools, by pool, then schema, lease and interval. */
const groups = new PerPool<string, HeartbeatGroup>();

/**
 * The heartbeat group of `pool` for `db`, `leaseMs` and `intervalMs`, shared by the workers on
 * that pool with those settings (workers of one `Client` made with a caller-given pool).
 */
export function heartbeatGroup(
  pool: pg.Pool,
  db: SqlScope,
  log: Logger,
  leaseMs: number,
  intervalMs: number,
): HeartbeatGroup {
  const key = [db.q, db.prepare, leaseMs, intervalMs].join('\u0000');
  return groups.get(pool, key, () => new HeartbeatGroup(pool, db, log, leaseMs, intervalMs));
}
