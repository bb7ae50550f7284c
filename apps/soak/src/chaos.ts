/**
 * The fault schedule. Every `faultEveryMs` (± 50 %) one fault of an enabled kind:
 *
 * - `kill`: SIGKILL a random worker process; the steps it held are recorded (the recovery
 *   clock starts), and a new process takes its slot 0.3–1.5 s later;
 * - `terminate`: `pg_terminate_backend` of 1–3 random worker connections (busy ones preferred:
 *   a claim, a heartbeat, a handler's open completion transaction, a LISTEN);
 * - `pg-restart`: PostgreSQL stopped (fast or immediate, alternately), down 0–2 s, started
 *   again; at most once per `pgRestartEveryMs`;
 * - `provider`: one of Stripe/SendGrid/Twilio answers its next 1–3 mutating requests with a
 *   fault: the effect then a dropped connection, a 5xx (with or without the effect), a 429, or
 *   an answer slower than the client's timeout (the effect happens);
 * - `stall`: a worker's event loop is blocked for the lease + 2 s (busy loop): it is alive, but
 *   its leases expire, its steps run elsewhere, and its late completions must be fenced out;
 * - `pgbouncer` (with `--pgbouncer`): the workers' PgBouncer SIGKILLed and started again, or its
 *   server connections closed by RECONNECT, the two taking turns (pgbouncer.ts);
 * - `failover`: the primary killed, the synchronous standby promoted, the address moved to it
 *   (failover.ts); at most once per `failoverEveryMs`, and only with a standby in sync.
 *
 * - `partition`: a worker's host cut off from the database and the fakes (its packets dropped)
 *   for 3–4 leases, then healed (partition.ts); no kill or stall meanwhile.
 *
 * The kinds are first taken in a shuffled round, and the 12 provider × fault pairs likewise, so
 * that even a short soak injects every kind; after that, at random.
 */
import type { PgBouncer } from '@cyclone/testkit';
import type pg from 'pg';
import type { SoakDatabase } from './database.js';
import { injectFailover, isReplicated } from './failover.js';
import { type Fakes, PROVIDER_FAULTS, type ProviderFault } from './fakes.js';
import type { Fleet } from './fleet.js';
import type { Journal, Orphan } from './journal.js';
import type { FaultKind } from './options.js';
import { injectPartition, recoveringFromPartition, type SoakHosts } from './partition.js';
import { injectPgBouncerFault } from './pgbouncer.js';
import type { Prng } from './prng.js';
import type { Provider } from './workload.js';

export interface ChaosOptions {
  kinds: FaultKind[];
  /** Length of the fault phase: the first restart comes at 40 % of it at the latest. */
  durationMs: number;
  faultEveryMs: number;
  pgRestartEveryMs: number;
  failoverEveryMs: number;
  leaseMs: number;
  /** `--max-recovery` (ms): a healed worker is spared kills and stalls this long at most. */
  maxRecoveryMs: number;
  providerTimeoutMs: number;
  /** The workers' PgBouncer, when they go through one (the `pgbouncer` fault). */
  bouncer?: PgBouncer;
  /** The workers' hosts, when the partition fault is on. */
  hosts?: SoakHosts;
}

const PROVIDERS: readonly Provider[] = ['stripe', 'sendgrid', 'twilio'];

export class Chaos {
  private stopped = false;
  private loop: Promise<void> | undefined;
  private round: FaultKind[] = [];
  private providerRound: [Provider, ProviderFault][] = [];
  private lastRestart = 0;
  private restartMode: 'fast' | 'immediate' = 'fast';
  /** Slots stalled right now (never killed or stalled again meanwhile). */
  private readonly stalled = new Set<number>();
  private readonly restarts = new Set<Promise<unknown>>();
  private lastFailover = 0;
  /** When the fault phase is due to end (Date.now() ms). */
  private endsAt = 0;

  constructor(
    private readonly db: SoakDatabase,
    private readonly admin: pg.Pool,
    private readonly fleet: Fleet,
    private readonly fakes: Fakes,
    private readonly journal: Journal,
    private readonly prng: Prng,
    private readonly options: ChaosOptions,
  ) {}

  start(): void {
    if (this.options.kinds.length === 0) return;
    this.endsAt = Date.now() + this.options.durationMs;
    // A partition first: it lasts several leases and must heal before the fault phase ends.
    if (this.options.kinds.includes('partition')) this.round = ['partition'];
    // The first restart is due at half the interval, or 40 % into the fault phase if sooner.
    const firstDue = Math.min(this.options.pgRestartEveryMs / 2, this.options.durationMs * 0.4);
    this.lastRestart = Date.now() - this.options.pgRestartEveryMs + firstDue;
    // The first failover at half its interval, or 60 % into the fault phase if sooner.
    const failoverDue = Math.min(this.options.failoverEveryMs / 2, this.options.durationMs * 0.6);
    this.lastFailover = Date.now() - this.options.failoverEveryMs + failoverDue;
    this.loop = this.run();
  }

  private async run(): Promise<void> {
    while (!this.stopped) {
      const wait = this.options.faultEveryMs * (0.5 + this.prng.next());
      await new Promise((r) => setTimeout(r, wait));
      if (this.stopped) break;
      const kind = this.nextKind();
      if (!kind) continue;
      let injected = false;
      try {
        injected = await this.inject(kind);
      } catch (err) {
        process.stderr.write(`soak: fault ${kind} failed: ${String(err)}\n`);
      }
      // Not possible right now (no worker free to kill or stall): first in line next time.
      if (!injected) this.round.unshift(kind);
    }
  }

  private nextKind(): FaultKind | undefined {
    const restartDue = Date.now() - this.lastRestart >= this.options.pgRestartEveryMs;
    // A restart waits while the replicated pair fails over or rebuilds its standby.
    const pairQuiet = !isReplicated(this.db) || this.db.quiet;
    const partitioned = this.options.hosts?.anyCut() ?? false;
    const usable = this.options.kinds.filter(
      (k) =>
        (k !== 'pg-restart' || (restartDue && pairQuiet)) &&
        (k !== 'failover' || this.failoverDue()) &&
        // During a partition the fleet is one worker short: no kill or stall on top of it.
        ((k !== 'kill' && k !== 'stall') || !partitioned) &&
        // One partition at a time, healed before the fault phase ends.
        (k !== 'partition' ||
          (!partitioned && Date.now() + 4 * this.options.leaseMs + 2_000 <= this.endsAt)),
    );
    if (usable.length === 0) return undefined;
    if (this.round.length === 0) this.round = this.prng.shuffle(this.options.kinds);
    // The round's next kind that can happen now; a restart not yet due waits for its time.
    const i = this.round.findIndex((k) => usable.includes(k));
    if (i >= 0) return this.round.splice(i, 1)[0];
    return this.prng.pick(usable);
  }

  /** Injects one fault of `kind`; false when none could be injected now. */
  private async inject(kind: FaultKind): Promise<boolean> {
    switch (kind) {
      case 'kill':
        return this.kill();
      case 'terminate':
        return this.terminate();
      case 'pg-restart':
        return this.restartPostgres();
      case 'provider':
        return this.providerFault();
      case 'stall':
        return this.stall();
      case 'pgbouncer':
        return this.pgbouncer();
      case 'partition':
        return this.partition();
      case 'failover':
        return this.failover();
    }
  }

  /** Restarts the workers' PgBouncer or closes its server connections (pgbouncer.ts). */
  private pgbouncer(): Promise<boolean> {
    const bouncer = this.options.bouncer;
    if (!bouncer) return Promise.resolve(false);
    return injectPgBouncerFault({
      bouncer,
      fleet: this.fleet,
      admin: this.admin,
      journal: this.journal,
      prng: this.prng,
      working: (slot) => !this.stalled.has(slot) && !this.options.hosts?.isCut(slot),
      track: (p) => {
        this.restarts.add(p);
        void p.finally(() => this.restarts.delete(p));
      },
    });
  }

  private failoverDue(): boolean {
    return (
      isReplicated(this.db) &&
      this.db.canFailOver &&
      Date.now() - this.lastFailover >= this.options.failoverEveryMs
    );
  }

  /** Starts a failover, which goes on in the background while other faults come. */
  private failover(): boolean {
    if (!isReplicated(this.db) || !this.db.canFailOver) return false;
    this.lastFailover = Date.now();
    const track = (p: Promise<unknown>) => {
      this.restarts.add(p);
      void p.finally(() => this.restarts.delete(p));
    };
    const ctx = { db: this.db, admin: this.admin, journal: this.journal, prng: this.prng, track };
    track(
      injectFailover(ctx).catch((err) =>
        process.stderr.write(`soak: fault failover failed: ${String(err)}\n`),
      ),
    );
    return true;
  }

  /** Cuts a worker's host off and heals it later (partition.ts). */
  private partition(): Promise<boolean> {
    const hosts = this.options.hosts;
    if (!hosts) return Promise.resolve(false);
    return injectPartition({
      hosts,
      fleet: this.fleet,
      admin: this.admin,
      journal: this.journal,
      prng: this.prng,
      leaseMs: this.options.leaseMs,
      maxRecoveryMs: this.options.maxRecoveryMs,
      endsAt: this.endsAt,
      busy: this.stalled,
      heldBy: (workerId) => this.heldBy(workerId),
      track: (p) => {
        this.restarts.add(p);
        void p.finally(() => this.restarts.delete(p));
      },
    });
  }

  private pickWorker(): { slot: number; workerId: string } | undefined {
    // Not during a partition: the fleet is one worker short already.
    if (this.options.hosts?.anyCut()) return undefined;
    const live = this.fleet.live().filter((w) => this.spareable(w));
    if (live.length === 0) return undefined;
    const w = this.prng.pick(live);
    return { slot: w.slot, workerId: w.workerId };
  }

  /**
   * True when `w` may be killed or stalled now: not stalled already, and not healed from a
   * partition without having worked since (a kill then would leave its recovery unseen).
   */
  private spareable(w: { slot: number; workerId: string }): boolean {
    return (
      !this.stalled.has(w.slot) &&
      !recoveringFromPartition(this.journal, w.workerId, this.options.maxRecoveryMs)
    );
  }

  /** The steps leased to `workerId` and running, read with retries (the server may be down). */
  private async heldBy(workerId: string): Promise<Orphan[]> {
    for (let i = 0; ; i++) {
      try {
        const { rows } = await this.admin.query<{ run_id: string; node: string; attempt: number }>(
          `SELECT run_id, node, attempt FROM cyclone.cyclone_steps
           WHERE lease_owner = $1 AND state = 'running'`,
          [workerId],
        );
        return rows.map((r) => ({ runId: r.run_id, node: r.node, attempt: r.attempt }));
      } catch (err) {
        if (i >= 40) throw err;
        await new Promise((r) => setTimeout(r, 250));
      }
    }
  }

  private async kill(): Promise<boolean> {
    const w = this.pickWorker();
    if (!w) return false;
    const killed = await this.fleet.kill(w.slot);
    if (!killed) return false;
    const at = killed.exit?.at ?? Date.now();
    // Dead: what it held stays as it is until the sweep moves it (or an in-flight COMMIT lands).
    const orphans = await this.heldBy(w.workerId);
    this.journal.losses.push({ cause: 'kill', workerId: w.workerId, at, orphans });
    this.journal.faults.push({
      kind: 'kill',
      at,
      slot: w.slot,
      workerId: w.workerId,
      orphans: orphans.length,
    });
    const restart = (async () => {
      await new Promise((r) => setTimeout(r, this.prng.int(300, 1_500)));
      for (let i = 0; i < 5 && !this.stopped; i++) {
        try {
          await this.fleet.spawn(w.slot);
          return;
        } catch {
          await new Promise((r) => setTimeout(r, 1_000));
        }
      }
    })();
    this.restarts.add(restart);
    void restart.finally(() => this.restarts.delete(restart));
    return true;
  }

  private async terminate(): Promise<boolean> {
    const { rows } = await this.admin.query<{ pid: number; busy: boolean }>(
      `SELECT pid, state IN ('active', 'idle in transaction') AS busy
       FROM pg_stat_activity
       WHERE application_name LIKE 'soak-w%' AND pid <> pg_backend_pid()`,
    );
    if (rows.length === 0) return false;
    const busy = rows.filter((r) => r.busy);
    const pool = busy.length > 0 && this.prng.next() < 0.7 ? busy : rows;
    const victims = this.prng.shuffle(pool).slice(0, this.prng.int(1, 3));
    const r = await this.admin.query<{ ok: boolean }>(
      'SELECT pg_terminate_backend(pid) AS ok FROM unnest($1::int[]) AS pid',
      [victims.map((v) => v.pid)],
    );
    this.journal.faults.push({
      kind: 'terminate',
      at: Date.now(),
      backends: r.rows.filter((x) => x.ok).length,
    });
    return true;
  }

  private async restartPostgres(): Promise<boolean> {
    if (!this.db.owned) return false;
    this.lastRestart = Date.now();
    const mode = this.restartMode;
    this.restartMode = mode === 'fast' ? 'immediate' : 'fast';
    const at = Date.now();
    try {
      const downMs = await this.db.restart(mode, this.prng.int(0, 2_000));
      this.journal.faults.push({ kind: 'pg-restart', at, mode, downMs });
    } finally {
      this.lastRestart = Date.now();
    }
    return true;
  }

  private providerFault(): boolean {
    if (this.providerRound.length === 0) {
      this.providerRound = this.prng.shuffle(
        PROVIDERS.flatMap((p) => PROVIDER_FAULTS.map((f) => [p, f] as [Provider, ProviderFault])),
      );
    }
    const [provider, fault] = this.providerRound.shift() as [Provider, ProviderFault];
    const times = this.prng.int(1, 3);
    const hits = this.fakes.inject(provider, fault, times, this.options.providerTimeoutMs);
    this.journal.faults.push({ kind: 'provider', at: Date.now(), provider, fault, times, hits });
    return true;
  }

  private async stall(): Promise<boolean> {
    // The worker holding the most steps: a stall should cost something.
    if (this.options.hosts?.anyCut()) return false; // the fleet is one worker short already
    const live = this.fleet.live().filter((w) => this.spareable(w));
    if (live.length < 2) return false; // keep one worker free to do the rescuing
    const { rows } = await this.admin.query<{ owner: string; n: number }>(
      `SELECT lease_owner AS owner, count(*)::int AS n FROM cyclone.cyclone_steps
       WHERE state = 'running' GROUP BY lease_owner`,
    );
    const held = new Map(rows.map((r) => [r.owner, r.n]));
    const w = [...live].sort(
      (a, b) => (held.get(b.workerId) ?? 0) - (held.get(a.workerId) ?? 0),
    )[0];
    if (!w) return false;
    const ms = this.options.leaseMs + 2_000;
    if (!this.fleet.block(w.slot, ms)) return false;
    const at = Date.now();
    this.stalled.add(w.slot);
    setTimeout(() => this.stalled.delete(w.slot), ms + 500);
    // Read a moment later: by then the worker is stuck in its loop and its rows are frozen.
    await new Promise((r) => setTimeout(r, 100));
    const orphans = await this.heldBy(w.workerId);
    this.journal.losses.push({ cause: 'stall', workerId: w.workerId, at, orphans });
    this.journal.faults.push({
      kind: 'stall',
      at,
      slot: w.slot,
      workerId: w.workerId,
      ms,
      orphans: orphans.length,
    });
    return true;
  }

  /** Stops injecting (a restart in progress completes; killed workers are restarted). */
  async stop(): Promise<void> {
    this.stopped = true;
    await this.loop;
    await Promise.all([...this.restarts]);
    await this.options.hosts?.healAll();
    // A worker healed last gets its chance to work again while runs are still going (bounded by
    // --max-recovery); else the settle period may end first and leave its recovery unseen.
    while (
      this.fleet
        .live()
        .some((w) => recoveringFromPartition(this.journal, w.workerId, this.options.maxRecoveryMs))
    ) {
      await new Promise((r) => setTimeout(r, 200));
    }
    this.fakes.clearFaults();
    // Slots whose restart gave up get a worker now.
    for (let slot = 0; slot < this.fleet.slotCount; slot++) {
      if (!this.fleet.hasLive(slot)) await this.fleet.spawn(slot).catch(() => {});
    }
  }
}
