/**
 * `Worker`: its options, its pools, `start()` / `stop()`, and the steps it holds, wired to the
 * pieces of the step lifecycle (ARCHITECTURE.md § The step lifecycle): the claim loop
 * (`claim.ts`), woken by the LISTEN connection (`listener.ts`); each claimed step executed
 * (`execute-step.ts`) and its outcome recorded (`completion.ts`); the leases kept alive
 * (`heartbeat.ts`); expired leases recovered (`sweep.ts`); the cron schedules it carries fired
 * (`scheduler.ts`).
 */
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import type pg from 'pg';
import { ClaimLoop, type StepHandle } from './claim.js';
import type { Client } from './client.js';
import { Completer } from './completion.js';
import { CompletionBatcher } from './completion-batcher.js';
import {
  type Db,
  DEAD_CONNECTION_MS,
  deadConnectionSettings,
  MAX_TIMER_MS,
  settlesWithin,
} from './db.js';
import type { Workflow } from './definitions.js';
import { ConfigError } from './errors.js';
import { Heartbeat, heartbeatGroup } from './heartbeat.js';
import { Listener } from './listener.js';
import type { Logger } from './logger.js';
import { PerPool } from './per-pool.js';
import { Registry, registryGroup } from './registry.js';
import type { Schedule } from './schedule.js';
import { Scheduler } from './scheduler.js';
import { sharedClaim } from './shared-claim.js';
import { queueStats } from './sql/metrics.js';
import type { SweptStep } from './sql/sweep.js';
import { Sweep } from './sweep.js';
import { READY_COUNT_CAP, WorkerTelemetry } from './telemetry.js';
import { makeWorkerPools } from './worker-pools.js';

/** The `WorkerOptions` key of a worker without heartbeats; see `WorkerOptions[NO_HEARTBEAT]`. */
export const NO_HEARTBEAT: unique symbol = Symbol('cyclone.noHeartbeat');

/** Options of `Worker`. Durations are in milliseconds. */
export interface WorkerOptions {
  client: Client;
  /** The workflows this worker runs; it claims only their steps. */
  // biome-ignore lint/suspicious/noExplicitAny: workflows of any input type
  workflows: readonly Workflow<any>[];
  /**
   * Handlers run at once. Default 10. While half of them or more run, the slots that steps free
   * are claimed together, once a tenth of them are free or 20 ms after the first was (fewer claim
   * statements for steps that end one at a time); with half or more free, at once.
   */
  concurrency?: number;
  /**
   * Lease of a claimed step. Default 5,000 ms. Kept alive by heartbeats while the handler runs;
   * a dead worker's steps are claimable again after at most the lease plus one sweep interval
   * (≈ 6 s with the defaults). Short leases kept alive by heartbeats, rather than long ones, keep
   * a dead worker's steps from waiting hours for rescue. A handler that blocks the event loop
   * longer than the lease minus one heartbeat interval loses its step to another worker
   * (at-least-once; its completion is fenced out): raise it for such handlers.
   */
  leaseMs?: number;
  /**
   * Interval of the batched lease extension. Default leaseMs / 3. At most `leaseMs / 2` (else a
   * `ConfigError`): the next beat is timed from the end of the last one's statement, so an
   * interval near the lease lets the lease lapse between beats and another worker runs the step
   * again; half the lease leaves the other half for the statement and a late event loop.
   */
  heartbeatIntervalMs?: number;
  /**
   * Cyclone's own tests only (`NO_HEARTBEAT` from `@cyclone/core/internal`): `true` makes a
   * worker that never extends its leases, so that they expire while its handlers run.
   */
  [NO_HEARTBEAT]?: boolean;
  /**
   * Interval of the recovery sweep (±20 % jitter). Default 1,000 ms (one indexed statement).
   * Workers of one `Client` made with a caller-given pool, with the same interval and
   * `sweepBatchSize`, run one sweep between them (it recovers every worker's expired leases).
   */
  sweepIntervalMs?: number;
  /** Most expired steps one sweep statement moves. Default 1,000. */
  sweepBatchSize?: number;
  /** Poll interval when no NOTIFY arrives. Default 1,000 ms. */
  pollIntervalMs?: number;
  /** Most steps one claim statement takes. Default `concurrency`. */
  claimBatchSize?: number;
  /** Unique id of this worker (lease owner). Default: host, pid and 8 random hex characters. */
  workerId?: string;
  /** Logger (pino-compatible). Default: the client's. */
  logger?: Logger;
  /** LISTEN for NOTIFY pickup. Default true; polling always runs as the fallback. */
  listen?: boolean;
  /**
   * Connections of the worker's pool for steps (each open `completionTx` holds one; failures
   * are recorded on it), when the client was made from a connectionString. Default
   * `min(concurrency, 10)`. Claims, heartbeats, the sweep and batched completions run on a
   * separate pool of 3 connections, so handlers holding transactions never starve them. With a
   * caller-given pool, everything shares it: size it at least `concurrency + 4`.
   */
  poolSize?: number;
  /**
   * How long a connection of the worker's may stay silent before it counts as dead (a network
   * partition, a host or proxy gone without closing it): it is closed and opened again. Default
   * 15,000 ms; at least 11,000 ms for an idle connection (TCP keepalive: probes after this
   * minus 10 s of silence, then 10 probes 1 s apart), and the query timeout of the engine's own
   * statements; the server ends the sessions of a vanished worker (an open `completionTx`
   * holding locks, the LISTEN) within the same time when the worker connects directly, not
   * through a transaction-pooling proxy. docs/operations.md § Network partitions.
   */
  deadConnectionMs?: number;
  /**
   * Cron schedules this worker carries (`newSchedule`); their workflows must be in `workflows`.
   * Any number of workers may carry the same schedules: each fire time makes one run.
   */
  // biome-ignore lint/suspicious/noExplicitAny: schedules of any input type
  schedules?: readonly Schedule<any>[];
}

/** Counters since `start()`. */
export interface WorkerStats {
  /** Steps claimed. */
  claimed: number;
  /**
   * Claims made, each one statement (the limited claim of an action: one transaction), whether
   * or not it found steps; with `claimed`, the steps a claim takes on average. A claim shared
   * with the other workers on a caller-given pool counts once for each worker in it.
   */
  claims: number;
  completed: number;
  failed: number;
  /** Completions or failures refused by the fence: the lease had been lost. */
  leaseLost: number;
  /** Attempts that snoozed (`SnoozeError`): run again later without using an attempt. */
  snoozed: number;
  /** Steps moved by this worker's sweeps (from any worker). */
  swept: number;
}

/**
 * Runs the steps of the given workflows. Start any number of workers, in any number of
 * processes; they coordinate only through PostgreSQL.
 */
export class Worker {
  /** This worker's id, the `lease_owner` of its claims. */
  readonly workerId: string;
  readonly stats: WorkerStats = {
    claimed: 0,
    claims: 0,
    completed: 0,
    failed: 0,
    leaseLost: 0,
    snoozed: 0,
    swept: 0,
  };
  private readonly workflows: Map<string, Workflow<unknown>>;
  private readonly concurrency: number;
  private readonly listenEnabled: boolean;
  private readonly log: Logger;
  /** Steps: completionTx, completion and failure statements. */
  private readonly pool: pg.Pool;
  /** Claims, heartbeats, the sweep, batched completions. */
  private readonly controlPool: pg.Pool;
  private readonly ownsPool: boolean;
  /** The steps this worker holds, by run, node and attempt, until their outcome is recorded. */
  private readonly inflight = new Set<StepHandle>();
  private state: 'new' | 'running' | 'stopping' | 'stopped' = 'new';
  private loopDone: Promise<void> | undefined;
  private readonly claims: ClaimLoop;
  private readonly listener: Listener;
  private readonly heartbeat: Heartbeat<StepHandle>;
  /** The recovery sweep: this worker's own, or the one shared by the workers on its pool. */
  private readonly sweep: { start(): void; stop(): void };
  private readonly scheduler: Scheduler | undefined;
  /** The worker's row in `cyclone_workers` and its throughput counts. */
  private readonly registry: Registry;
  /** Spans and metrics, when an OpenTelemetry SDK was registered before the worker was made. */
  private readonly telemetry: WorkerTelemetry | undefined;
  private readonly db: Db;
  /** Ends the report of the ready steps to the metrics (set while the worker runs). */
  private unobserveQueue: (() => void) | undefined;

  /** @throws ConfigError on a bad option or two workflows with one name. */
  constructor(options: WorkerOptions) {
    const client = options.client;
    this.workflows = new Map();
    for (const wf of options.workflows) {
      if (this.workflows.has(wf.name))
        throw new ConfigError(`workflow '${wf.name}' is registered twice`);
      this.workflows.set(wf.name, wf);
    }
    if (this.workflows.size === 0) throw new ConfigError('a Worker needs at least one workflow');
    const positive = (name: string, v: number | undefined, def: number) => {
      const x = v ?? def;
      if (!Number.isFinite(x) || x <= 0 || x > MAX_TIMER_MS) {
        throw new ConfigError(
          `${name} must be a positive number of at most ${MAX_TIMER_MS}, got ${v}`,
        );
      }
      return x;
    };
    this.concurrency = Math.trunc(positive('concurrency', options.concurrency, 10));
    const leaseMs = positive('leaseMs', options.leaseMs, 5_000);
    // Without heartbeats: the longest interval a timer takes (24.8 days), none comes in a test.
    const heartbeatIntervalMs = options[NO_HEARTBEAT]
      ? MAX_TIMER_MS
      : positive('heartbeatIntervalMs', options.heartbeatIntervalMs, leaseMs / 3);
    if (!options[NO_HEARTBEAT] && heartbeatIntervalMs > leaseMs / 2) {
      throw new ConfigError(
        `heartbeatIntervalMs (${heartbeatIntervalMs}) must be at most half of leaseMs (${leaseMs}): ` +
          'each beat is timed from the end of the last, so a longer interval lets the lease lapse while its handler runs',
      );
    }
    const sweepIntervalMs = positive('sweepIntervalMs', options.sweepIntervalMs, 1_000);
    const sweepBatchSize = Math.trunc(positive('sweepBatchSize', options.sweepBatchSize, 1_000));
    const pollIntervalMs = positive('pollIntervalMs', options.pollIntervalMs, 1_000);
    const claimBatchSize = Math.trunc(
      positive('claimBatchSize', options.claimBatchSize, this.concurrency),
    );
    this.listenEnabled = options.listen ?? true;
    this.workerId =
      options.workerId ?? `${hostname()}:${process.pid}:${randomBytes(4).toString('hex')}`;
    // The services the workers on one pool share outlive the worker that made them, so they log
    // with baseLog: their lines name no worker.
    const baseLog = options.logger ?? client.logger;
    const log = baseLog.child({ workerId: this.workerId });
    this.log = log;
    const dead = deadConnectionSettings(
      positive('deadConnectionMs', options.deadConnectionMs, DEAD_CONNECTION_MS),
    );
    const pools = makeWorkerPools(
      client,
      options.poolSize ?? Math.min(this.concurrency, 10),
      log,
      leaseMs,
      dead,
    );
    this.pool = pools.pool;
    this.controlPool = pools.controlPool;
    this.ownsPool = pools.owned;
    const db = client.db;
    this.db = db;
    const control = { pool: this.controlPool, db, log };
    const telemetry = WorkerTelemetry.create();
    this.telemetry = telemetry;
    const registry = new Registry(
      {
        ...control,
        inFlight: () => this.inflight.size,
        // Workers on a caller-given pool report together: one statement per interval for all.
        ...(pools.owned ? {} : { group: registryGroup(this.controlPool, db, baseLog) }),
      },
      {
        workerId: this.workerId,
        concurrency: this.concurrency,
        workflows: [...this.workflows.keys()],
      },
    );
    this.registry = registry;
    const completer = new Completer({
      db,
      pool: this.pool,
      batcher: pools.owned
        ? new CompletionBatcher(this.controlPool, db)
        : sharedBatcher(this.controlPool, db),
      retryDeadlineMs: leaseMs,
      idleLimitMs: leaseMs,
      log,
      counters: this.stats,
      recorded: (workflow, recorded) => registry.count(workflow, recorded),
    });
    this.claims = new ClaimLoop(
      {
        controlPool: this.controlPool,
        pool: this.pool,
        db,
        client,
        workflows: this.workflows,
        log,
        counters: this.stats,
        completer,
        inflight: this.inflight,
        telemetry,
        isRunning: () => this.state === 'running',
        sharedClaim: pools.owned
          ? undefined
          : sharedClaim({
              pool: this.controlPool,
              db,
              leaseMs,
              workflows: [...this.workflows.keys()],
              nodeKeys: [...this.workflows.values()].flatMap((wf) =>
                wf.nodes.map((n) => `${wf.name}/${n.name}`),
              ),
            }),
      },
      {
        workerId: this.workerId,
        leaseMs,
        concurrency: this.concurrency,
        batchSize: claimBatchSize,
        pollIntervalMs,
      },
    );
    this.listener = new Listener({
      // With a caller-given pool, the settings it connects with.
      connection: client.connectionString
        ? { connectionString: client.connectionString }
        : (client.pool as unknown as { options: pg.ClientConfig }).options,
      channel: db.channel,
      keepAliveIdleMs: dead.keepAliveIdleMs,
      serverSql: db.prepare ? dead.serverSql : undefined,
      log,
      isRunning: () => this.state === 'running',
      wants: (payload) => this.workflows.has(payload) || this.scheduler?.wants(payload) === true,
      wake: (payload) =>
        payload !== undefined && this.scheduler?.wants(payload)
          ? this.scheduler.wake()
          : this.claims.wake(),
    });
    this.heartbeat = new Heartbeat(
      {
        ...control,
        steps: () => this.inflight.values(),
        leaseLost: (step) => step.leaseLost(),
        // Workers on a caller-given pool beat together: one statement per interval for all.
        ...(pools.owned
          ? {}
          : {
              group: heartbeatGroup(this.controlPool, db, baseLog, leaseMs, heartbeatIntervalMs),
            }),
      },
      { workerId: this.workerId, leaseMs, intervalMs: heartbeatIntervalMs },
    );
    const swept = (steps: readonly SweptStep[]) => {
      this.stats.swept += steps.length;
      telemetry?.swept(steps);
    };
    const sweepConfig = { intervalMs: sweepIntervalMs, batchSize: sweepBatchSize };
    this.sweep = pools.owned
      ? new Sweep({ ...control, swept }, sweepConfig)
      : sharedSweep(this.controlPool, db, baseLog, sweepConfig, swept);
    this.scheduler = options.schedules?.length
      ? new Scheduler({
          ...control,
          client,
          schedules: options.schedules,
          carries: (workflow) => this.workflows.has(workflow),
        })
      : undefined;
  }

  /**
   * Steps this worker holds now: handlers running, plus steps whose handler returned and whose
   * outcome is being recorded: at most `concurrency` handlers, and at most 2 × `concurrency`
   * steps in all.
   */
  get running(): number {
    return this.inflight.size;
  }

  /**
   * Starts claiming. Resolves once the loops run (LISTEN is connected, or failed and left to
   * reconnect while polling covers).
   * @throws Error when called twice.
   */
  async start(): Promise<void> {
    if (this.state !== 'new') throw new Error(`worker ${this.workerId} was already started`);
    this.state = 'running';
    if (this.listenEnabled) await this.listener.start();
    this.heartbeat.start();
    this.sweep.start();
    // Bounded: an unreachable database must not hold the start up; the next refresh registers.
    await settlesWithin(this.registry.start(), 2_000);
    await this.scheduler?.start();
    this.unobserveQueue = this.telemetry?.observeQueue(
      () => queueStats(this.controlPool, this.db, READY_COUNT_CAP),
      this.log,
    );
    this.loopDone = this.claims.run();
    this.log.info(
      { workflows: [...this.workflows.keys()], concurrency: this.concurrency },
      'worker started',
    );
  }

  /**
   * Graceful stop: claims nothing new, lets in-flight handlers finish for up to `graceMs`
   * (default 30,000 ms), then aborts the rest (`ctx.signal`, reason "worker stopping"), records
   * their attempts as failed so they are retried at once elsewhere, and closes the worker's pool.
   * Steps whose handler already returned are still recorded before it resolves, even past
   * `graceMs` (a completion blocked behind another transaction's lock waits for it): giving them
   * up would run a finished handler again.
   */
  async stop(options: { graceMs?: number } = {}): Promise<void> {
    if (this.state === 'stopped' || this.state === 'stopping') return;
    if (this.state === 'new') {
      this.state = 'stopped';
      if (this.ownsPool) await Promise.all([this.pool.end(), this.controlPool.end()]);
      return;
    }
    this.state = 'stopping';
    this.unobserveQueue?.();
    this.claims.wake();
    await this.scheduler?.stop();
    // Longer than Node's timers take means "wait as long as it takes" (about 24.8 days).
    const graceMs = Math.min(options.graceMs ?? 30_000, MAX_TIMER_MS);
    const stopDeadline = Date.now() + graceMs;
    // The loop ends after its current claim; bounded by the grace period if the claim hangs
    // (say, behind an operator's lock): then the claim is cancelled, so that nothing it would
    // have claimed runs on a stopped worker.
    if (!(await settlesWithin(this.loopDone, graceMs))) {
      await this.claims.cancel();
      await settlesWithin(this.loopDone, 1_000);
    }
    await this.listener.stop();
    await this.drain(stopDeadline);
    // The heartbeat ran until now: the steps being drained kept their leases.
    this.heartbeat.stop();
    this.sweep.stop();
    // Bounded: an unreachable database leaves the row to be deleted by another worker once stale.
    await settlesWithin(this.registry.stop(), 2_000);
    this.state = 'stopped';
    if (this.ownsPool) {
      // A statement still blocked (say, behind an operator's lock) keeps its connection; the pool
      // closes it when the statement returns, and stop() does not wait past its deadline for it.
      const ended = Promise.all([this.pool.end(), this.controlPool.end()]);
      await settlesWithin(ended, Math.max(1_000, stopDeadline - Date.now()));
    }
    this.log.info({ ...this.stats }, 'worker stopped');
  }

  /**
   * Waits for the in-flight steps until `deadline`, then aborts the handlers still running and
   * waits for every outcome to be recorded (however long that takes).
   */
  private async drain(deadline: number): Promise<void> {
    const drained = Promise.all([...this.inflight.values()].map((h) => h.done));
    if (!(await settlesWithin(drained, deadline - Date.now()))) {
      this.log.warn(
        { steps: this.inflight.size },
        'grace period over: aborting in-flight handlers',
      );
      for (const h of this.inflight.values()) h.abort(new Error('worker stopping'));
      await Promise.all([...this.inflight.values()].map((h) => h.done));
    }
  }
}

/** The completion batchers of caller-given pools, one per pool and schema. */
const batchers = new PerPool<Db, CompletionBatcher>();

/**
 * The completion batcher of `pool` for `db`, shared by every worker on that pool (workers of one
 * `Client` made with a caller-given pool): their completions go out together, one statement per
 * batch for the process rather than one per worker (a batch is fenced step by step, whichever
 * worker a step belongs to). A worker with its own pools keeps its own batcher.
 */
function sharedBatcher(pool: pg.Pool, db: Db): CompletionBatcher {
  return batchers.get(pool, db, () => new CompletionBatcher(pool, db));
}

/** The sweeps of caller-given pools, by pool, then schema and configuration. */
const sweeps = new PerPool<string, SharedSweep>();

/** One sweep run for every worker on a pool that started it, until the last of them stops. */
interface SharedSweep {
  sweep: Sweep;
  /** The `swept` callbacks of the workers using it; the first one counts the steps moved. */
  users: Set<(steps: readonly SweptStep[]) => void>;
}

/**
 * The recovery sweep of `pool` for `db` with `config`, shared by the workers on that pool with
 * the same settings (workers of one `Client` made with a caller-given pool): the sweep recovers
 * every worker's expired leases, so one per process does what one per worker did, at a fraction
 * of the statements. It runs while at least one of them runs; the steps it moves count in the
 * `stats.swept` of the oldest running one. A worker with its own pools keeps its own sweep.
 */
function sharedSweep(
  pool: pg.Pool,
  db: Db,
  log: Logger,
  config: { intervalMs: number; batchSize: number },
  swept: (steps: readonly SweptStep[]) => void,
): { start(): void; stop(): void } {
  const key = `${db.schema}\u0000${config.intervalMs}\u0000${config.batchSize}`;
  return {
    start() {
      const shared = sweeps.get(pool, key, () => {
        const users = new Set<(steps: readonly SweptStep[]) => void>();
        const sweep = new Sweep(
          {
            pool,
            db,
            log,
            swept: (steps) => users.values().next().value?.(steps),
          },
          config,
        );
        sweep.start();
        return { sweep, users };
      });
      shared.users.add(swept);
    },
    stop() {
      const shared = sweeps.peek(pool, key);
      if (!shared?.users.delete(swept) || shared.users.size > 0) return;
      shared.sweep.stop();
      sweeps.delete(pool, key);
    },
  };
}
