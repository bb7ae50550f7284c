/**
 * `Worker`: claims steps, runs their handlers under leases kept alive by heartbeats, completes
 * them in a fenced transaction, records failures with backoff, and runs the recovery sweep
 * (ARCHITECTURE.md § The step lifecycle). Pickup is LISTEN/NOTIFY with polling as the fallback.
 *
 * The SQL of each transition is in sql.ts; the per-step logic is in step-runner.ts.
 */
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import pg from 'pg';
import type { Client } from './client.js';
import { CompletionBatcher } from './completion-batcher.js';
import {
  CONNECT_TIMEOUT_MS,
  isConnectionError,
  MAX_TIMER_MS,
  settlesWithin,
  withConnection,
} from './db.js';
import type { Workflow } from './definitions.js';
import { ConfigError } from './errors.js';
import type { Logger } from './logger.js';
import { claimSteps } from './sql/claim.js';
import { extendLeases } from './sql/heartbeat.js';
import { sweepExpiredLeases } from './sql/sweep.js';
import { runStep, type StepHandle } from './step-runner.js';

/** Options of `Worker`. Durations are in milliseconds. */
export interface WorkerOptions {
  client: Client;
  /** The workflows this worker runs; it claims only their steps. */
  // biome-ignore lint/suspicious/noExplicitAny: workflows of any input type
  workflows: readonly Workflow<any>[];
  /** Handlers run at once. Default 10. */
  concurrency?: number;
  /**
   * Lease of a claimed step. Default 5,000 ms. Kept alive by heartbeats while the handler runs;
   * a dead worker's steps are claimable again after at most the lease plus one sweep interval
   * (≈ 6 s with the defaults; issue 8's target is ≤ 10 s). Short leases kept alive by heartbeats
   * are the design's rule (ARCHITECTURE.md § Pitfalls: hour-long rescue windows). A handler that
   * blocks the event loop longer than the lease minus one heartbeat interval loses its step to
   * another worker (at-least-once; its completion is fenced out): raise it for such handlers.
   */
  leaseMs?: number;
  /** Interval of the batched lease extension. Default leaseMs / 3. */
  heartbeatIntervalMs?: number;
  /** Interval of the recovery sweep (±20 % jitter). Default 1,000 ms (one indexed statement). */
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
}

/** Counters since `start()`. */
export interface WorkerStats {
  claimed: number;
  completed: number;
  failed: number;
  /** Completions or failures refused by the fence: the lease had been lost. */
  leaseLost: number;
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
  readonly stats: WorkerStats = { claimed: 0, completed: 0, failed: 0, leaseLost: 0, swept: 0 };
  private readonly client: Client;
  private readonly workflows: Map<string, Workflow<unknown>>;
  private readonly concurrency: number;
  private readonly leaseMs: number;
  private readonly heartbeatIntervalMs: number;
  private readonly sweepIntervalMs: number;
  private readonly sweepBatchSize: number;
  private readonly pollIntervalMs: number;
  private readonly claimBatchSize: number;
  private readonly listenEnabled: boolean;
  private readonly log: Logger;
  /** Steps: completionTx, completion and failure statements. */
  private readonly pool: pg.Pool;
  /** Claims, heartbeats, the sweep. */
  private readonly controlPool: pg.Pool;
  private readonly ownsPool: boolean;
  private readonly inflight = new Map<string, StepHandle>();
  /** Steps in `inflight` whose handler settled and whose outcome is being recorded. */
  private finishing = 0;
  private state: 'new' | 'running' | 'stopping' | 'stopped' = 'new';
  private wakeResolve: (() => void) | undefined;
  private wakePending = false;
  private loopDone: Promise<void> | undefined;
  private timers: { t?: NodeJS.Timeout }[] = [];
  private listener: pg.Client | undefined;
  private readonly completions: CompletionBatcher;
  /** Backend pid of the claim statement in flight, if any. */
  private claimPid: number | undefined;
  /** `workflow/node` of every node this worker can run: it claims only those. */
  private readonly nodeKeys: string[];

  /** @throws ConfigError on a bad option or two workflows with one name. */
  constructor(options: WorkerOptions) {
    this.client = options.client;
    this.workflows = new Map();
    for (const wf of options.workflows) {
      if (this.workflows.has(wf.name))
        throw new ConfigError(`workflow '${wf.name}' is registered twice`);
      this.workflows.set(wf.name, wf);
    }
    if (this.workflows.size === 0) throw new ConfigError('a Worker needs at least one workflow');
    this.nodeKeys = [...this.workflows.values()].flatMap((wf) =>
      wf.nodes.map((n) => `${wf.name}/${n.name}`),
    );
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
    this.leaseMs = positive('leaseMs', options.leaseMs, 5_000);
    this.heartbeatIntervalMs = positive(
      'heartbeatIntervalMs',
      options.heartbeatIntervalMs,
      this.leaseMs / 3,
    );
    this.sweepIntervalMs = positive('sweepIntervalMs', options.sweepIntervalMs, 1_000);
    this.sweepBatchSize = Math.trunc(positive('sweepBatchSize', options.sweepBatchSize, 1_000));
    this.pollIntervalMs = positive('pollIntervalMs', options.pollIntervalMs, 1_000);
    this.claimBatchSize = Math.trunc(
      positive('claimBatchSize', options.claimBatchSize, this.concurrency),
    );
    this.listenEnabled = options.listen ?? true;
    this.workerId =
      options.workerId ?? `${hostname()}:${process.pid}:${randomBytes(4).toString('hex')}`;
    this.log = (options.logger ?? this.client.logger).child({ workerId: this.workerId });
    if (this.client.connectionString) {
      const make = (max: number, onConnectSql?: string) => {
        const p = new pg.Pool({
          connectionString: this.client.connectionString,
          max,
          connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
          keepAlive: true,
          // Run before the new connection is handed out (pg-pool awaits it). A failure is only
          // logged: the settings are planner hints, and the statements work without them.
          ...(onConnectSql
            ? {
                onConnect: async (c: pg.ClientBase) => {
                  await c.query(onConnectSql).catch((err: Error) => {
                    this.log.warn({ err: err.message }, `could not run "${onConnectSql}"`);
                  });
                },
              }
            : {}),
        });
        p.on('error', (err) => this.log.warn({ err: err.message }, 'idle connection lost'));
        return p;
      };
      this.pool = make(options.poolSize ?? Math.min(this.concurrency, 10));
      // The engine's own statements only (claims, heartbeats, the sweep, batched completions;
      // never a handler's query), with two planner settings (measured by bench/):
      // - no bitmap scans: right after a burst of submissions, before autovacuum has analyzed
      //   the table, the planner thinks the claimable backlog is tiny and reads all of it
      //   through a bitmap scan and a sort on every claim (7.4 ms a claim at 20,000 claimable
      //   steps instead of 0.5 ms by the claim index, read in scheduled_at order);
      // - generic plans: a statement over arrays (`unnest($1)`) is otherwise planned again on
      //   every execution, at 250–350 µs of server CPU, and at some batch sizes the per-call
      //   plan is a worse one (a completion batch of 100: 82 µs a step, against 18 µs with the
      //   generic plan, which goes by the primary key at every size; test/prepared.test.ts
      //   checks those plans).
      // A session SET, not a startup option (PgBouncer refuses unknown startup parameters); not
      // sent when prepared statements are off, the sign of a transaction-pooling proxy, where a
      // session setting would land on whichever server connection runs it. Three connections:
      // a claim and a completion batch in flight, and one for the heartbeat and the sweep.
      this.controlPool = make(
        3,
        this.client.db.prepare
          ? 'SET enable_bitmapscan = off; SET plan_cache_mode = force_generic_plan'
          : undefined,
      );
      this.ownsPool = true;
    } else {
      this.pool = this.client.pool;
      this.controlPool = this.client.pool;
      this.ownsPool = false;
    }
    this.completions = new CompletionBatcher(this.controlPool, this.client.db);
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
    if (this.listenEnabled) await this.connectListener();
    this.timers.push(this.every(this.heartbeatIntervalMs, () => this.heartbeat(), 0));
    this.timers.push(this.every(this.sweepIntervalMs, () => this.sweep(), 0.2));
    this.loopDone = this.loop();
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
    this.wake();
    // Longer than Node's timers take means "wait as long as it takes" (about 24.8 days).
    const graceMs = Math.min(options.graceMs ?? 30_000, MAX_TIMER_MS);
    const stopDeadline = Date.now() + graceMs;
    // The loop ends after its current claim; bounded by the grace period if the claim hangs
    // (say, behind an operator's lock): then the claim is cancelled, so that nothing it would
    // have claimed runs on a stopped worker.
    const loopEnded = await settlesWithin(this.loopDone, graceMs);
    if (!loopEnded) {
      const pid = this.claimPid;
      if (pid) {
        await withConnection(this.controlPool, (c) =>
          c.query('SELECT pg_cancel_backend($1)', [pid]),
        ).catch(() => {});
      }
      await settlesWithin(this.loopDone, 1_000);
    }
    const listener = this.listener;
    this.listener = undefined;
    await listener?.end().catch(() => {});
    const drained = Promise.all([...this.inflight.values()].map((h) => h.done));
    if (!(await settlesWithin(drained, stopDeadline - Date.now()))) {
      this.log.warn(
        { steps: this.inflight.size },
        'grace period over: aborting in-flight handlers',
      );
      for (const h of this.inflight.values()) h.abort(new Error('worker stopping'));
      await Promise.all([...this.inflight.values()].map((h) => h.done));
    }
    for (const h of this.timers) clearTimeout(h.t);
    this.timers = [];
    this.state = 'stopped';
    if (this.ownsPool) {
      // A statement still blocked (say, behind an operator's lock) keeps its connection; the pool
      // closes it when the statement returns, and stop() does not wait past its deadline for it.
      const ended = Promise.all([this.pool.end(), this.controlPool.end()]);
      await settlesWithin(ended, Math.max(1_000, stopDeadline - Date.now()));
    }
    this.log.info({ ...this.stats }, 'worker stopped');
  }

  /** Runs `fn` every `ms` (± `jitter` fraction), never overlapping itself, until stopped. */
  private every(ms: number, fn: () => Promise<void>, jitter: number): { t?: NodeJS.Timeout } {
    const holder: { t?: NodeJS.Timeout } = {};
    const next = () => ms * (1 + jitter * (Math.random() * 2 - 1));
    const tick = async () => {
      if (this.isStopped()) return;
      await fn().catch((err) => this.log.error({ err: String(err) }, 'background task failed'));
      if (!this.isStopped()) holder.t = setTimeout(tick, next());
    };
    holder.t = setTimeout(tick, next());
    return holder;
  }

  private isStopped(): boolean {
    return this.state === 'stopped';
  }

  private wake(): void {
    this.wakePending = true;
    this.wakeResolve?.();
  }

  private waitForWake(ms: number): Promise<void> {
    if (this.wakePending) {
      this.wakePending = false;
      return Promise.resolve();
    }
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(t);
        this.wakeResolve = undefined;
        resolve();
      };
      const t = setTimeout(done, ms);
      this.wakeResolve = () => {
        this.wakePending = false;
        done();
      };
    });
  }

  /**
   * Steps the next claim may take. A slot is free once its handler settled, even while its
   * outcome is still being recorded (batched completion), so the next claim overlaps the
   * completion statement instead of waiting for it. The worker holds at most 2 × `concurrency`
   * steps in all (running or waiting to be recorded), so a slow database does not let them pile
   * up.
   */
  private freeSlots(): number {
    const handlers = this.inflight.size - this.finishing;
    return Math.min(
      this.concurrency - handlers,
      2 * this.concurrency - this.inflight.size,
      this.claimBatchSize,
    );
  }

  /** The claim loop: claims up to the free slots, then waits for a NOTIFY, a free slot or the poll. */
  private async loop(): Promise<void> {
    let failures = 0;
    while (this.state === 'running') {
      const want = this.freeSlots();
      if (want > 0) {
        this.wakePending = false;
        let got: number;
        try {
          got = await this.claim(want);
          failures = 0;
        } catch (err) {
          // One failed statement must not stop the loop (ARCHITECTURE.md § Pitfalls).
          failures++;
          this.log.error({ err: String(err), failures }, 'claim failed; backing off');
          await this.waitForWake(Math.min(100 * 2 ** failures, 5_000));
          continue;
        }
        if (got === want) continue;
      }
      await this.waitForWake(this.pollIntervalMs);
    }
  }

  private async claim(limit: number): Promise<number> {
    const rows = await withConnection(this.controlPool, async (c) => {
      // Known while the statement runs, so that stop() can cancel a claim that hangs.
      this.claimPid = (c as unknown as { processID?: number }).processID;
      try {
        return await claimSteps(c, this.client.db, {
          workflows: [...this.workflows.keys()],
          limit,
          workerId: this.workerId,
          leaseMs: this.leaseMs,
          nodeKeys: this.nodeKeys,
        });
      } finally {
        this.claimPid = undefined;
      }
    });
    for (const row of rows) {
      this.stats.claimed++;
      // Keyed by attempt too: this worker may re-claim a node whose older attempt (its lease
      // lost) is still settling here, and the two must not evict each other.
      const key = `${row.run_id}\u0000${row.node}\u0000${row.attempt}`;
      const handle = runStep(row, {
        client: this.client,
        pool: this.pool,
        workflow: this.workflows.get(row.workflow) as Workflow<unknown>,
        log: this.log,
        stats: this.stats,
        retryDeadlineMs: this.leaseMs,
        stopping: () => this.state !== 'running',
        onFinishing: () => {
          this.finishing++;
          this.wake();
        },
        controlPool: this.controlPool,
        completions: this.completions,
      });
      this.inflight.set(key, handle);
      handle.done.finally(() => {
        if (handle.finishing) this.finishing--;
        if (this.inflight.get(key) === handle) this.inflight.delete(key);
        this.wake();
      });
    }
    return rows.length;
  }

  /**
   * Extends the leases of all in-flight steps in one statement, including those whose outcome
   * waits to be recorded (their lease must outlive a slow completion); aborts the handlers of
   * those found lost.
   */
  private async heartbeat(): Promise<void> {
    const batch = [...this.inflight.values()];
    if (batch.length === 0) return;
    let rows: { run_id: string; node: string; attempt: number }[];
    try {
      rows = await extendLeases(this.controlPool, this.client.db, {
        steps: batch,
        owner: this.workerId,
        leaseMs: this.leaseMs,
      });
    } catch (err) {
      this.log.warn(
        { err: String(err), connection: isConnectionError(err) },
        'heartbeat failed; will retry',
      );
      return;
    }
    const held = new Set(rows.map((r) => `${r.run_id}\u0000${r.node}\u0000${r.attempt}`));
    for (const h of batch) {
      if (!held.has(`${h.runId}\u0000${h.node}\u0000${h.attempt}`) && !h.finishing) h.leaseLost();
    }
  }

  /** The recovery sweep (any worker; no leader). Loops while full batches come back. */
  private async sweep(): Promise<void> {
    for (let i = 0; i < 10 && !this.isStopped(); i++) {
      let rows: { run_id: string; node: string; state: string; attempt: number }[];
      try {
        rows = await sweepExpiredLeases(this.controlPool, this.client.db, {
          limit: this.sweepBatchSize,
        });
      } catch (err) {
        this.log.warn({ err: String(err) }, 'recovery sweep failed; will retry');
        return;
      }
      this.stats.swept += rows.length;
      for (const r of rows) {
        this.log.warn(
          { runId: r.run_id, node: r.node, attempt: r.attempt, state: r.state },
          'lease expired: step recovered by the sweep',
        );
      }
      if (rows.length < this.sweepBatchSize) return;
    }
  }

  private async connectListener(): Promise<void> {
    if (this.state !== 'running') return;
    // A dedicated connection (LISTEN needs one); with a caller-given pool, its settings.
    const c = new pg.Client({
      ...(this.client.connectionString
        ? { connectionString: this.client.connectionString }
        : (this.client.pool as unknown as { options: pg.ClientConfig }).options),
      connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
      keepAlive: true,
    });
    c.on('notification', (msg) => {
      if (!msg.payload || this.workflows.has(msg.payload)) this.wake();
    });
    const reconnect = () => {
      if (this.listener !== c) return;
      this.listener = undefined;
      c.end().catch(() => {});
      if (this.state === 'running') {
        this.log.warn({}, 'LISTEN connection lost; polling until it is back');
        setTimeout(() => void this.connectListener(), 1_000).unref();
      }
    };
    c.on('error', reconnect);
    c.on('end', reconnect);
    try {
      await c.connect();
      await c.query(`LISTEN "${this.client.db.channel}"`);
      if (this.state !== 'running') {
        // stop() ran while this connection was being opened.
        c.removeAllListeners('end');
        await c.end().catch(() => {});
        return;
      }
      this.listener = c;
      // Work may have arrived while we were not listening.
      this.wake();
    } catch (err) {
      c.end().catch(() => {});
      this.log.warn({ err: String(err) }, 'LISTEN failed; polling until it works');
      if (this.state === 'running') setTimeout(() => void this.connectListener(), 1_000).unref();
    }
  }
}
