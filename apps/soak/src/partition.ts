/**
 * The `partition` fault. With it on, every worker process runs as a host of its own: a Linux
 * network namespace joined to a bridge (`@cyclone/testkit`'s HostNetwork), reaching PostgreSQL
 * and the provider fakes through TCP forwarders the soak runs on the bridge's address (the
 * database and the fakes listen on loopback, which a namespace cannot reach).
 *
 * One partition: the worker holding the most steps (not a stalled one) is cut off — its frames
 * dropped on the bridge, so its connections go silent, nothing is refused — for 3 to 4 leases,
 * then healed. Only one at a time, with another worker running, and no kill or stall comes while
 * it lasts (chaos.ts), so that faults do not stack up into a fleet too small for the load; and
 * only when it heals before the fault phase ends, while there is work to take.
 * Measured in the background: the takeover (cut → every step it held was claimed again or had
 * ended) and the recovery (heal → its first handler start: it claimed new work by itself, never
 * restarted). Until that start (or `--max-recovery` after the heal) the chaos neither kills nor
 * stalls the healed worker and the fault phase does not end, since either would leave the
 * recovery unseen; one still unseen for such a reason carries it in `unmeasured`. The longer partition that outlasts the engine's `deadConnectionMs` is
 * packages/idempotency/test/partition.netns.test.ts.
 *
 * The forwarders stand for a proxy in front of PostgreSQL configured to find dead clients
 * (PgBouncer's `tcp_keepalive` and `tcp_user_timeout`): their sockets towards the hosts carry TCP
 * keepalive, and since Node cannot set TCP_USER_TIMEOUT (a socket with data the host never
 * acknowledged is otherwise retransmitted to for 15 minutes), a host's forwarded connections are
 * closed `DEAD_CONNECTION_MS` after its cut, as that setting would have the kernel do. Its server
 * sessions end with them, so the locks its open transactions held are released.
 */
import { connect, createServer, type Server, type Socket } from 'node:net';
import { HostNetwork, type NetHost, netnsSupport } from '@cyclone/testkit';
import type pg from 'pg';
import type { Fleet } from './fleet.js';
import type { FaultRecord, Journal, Orphan } from './journal.js';
import type { Prng } from './prng.js';
import type { WorkerEnv } from './protocol.js';

/** The engine's default `deadConnectionMs`, which the forwarders' own bound follows. */
const DEAD_CONNECTION_MS = 15_000;

/** Why the `partition` fault cannot run here (not root, no iproute2…), or undefined. */
export function partitionUnavailable(): string | undefined {
  return netnsSupport();
}

/** The URLs of a worker's environment that a host must reach through a forwarder. */
const URL_KEYS = [
  'SOAK_DATABASE_URL',
  'SOAK_STRIPE_URL',
  'SOAK_SENDGRID_URL',
  'SOAK_TWILIO_URL',
] as const;

/** A TCP forwarder from the bridge's address to a loopback service; see the module comment. */
class Forwarder {
  /** Each forwarded connection: the host's socket and PostgreSQL's (or a fake's). */
  private readonly pairs = new Set<{ down: Socket; up: Socket }>();
  private constructor(
    private readonly server: Server,
    readonly port: number,
  ) {}

  static async start(listenHost: string, target: { host: string; port: number }) {
    let fwd: Forwarder | undefined;
    const server = createServer((down) => fwd?.accept(down, target));
    await new Promise<void>((r) => server.listen(0, listenHost, r));
    fwd = new Forwarder(server, (server.address() as { port: number }).port);
    return fwd;
  }

  private accept(down: Socket, target: { host: string; port: number }): void {
    down.setKeepAlive(true, DEAD_CONNECTION_MS - 10_000);
    const up = connect(target.port, target.host);
    const pair = { down, up };
    this.pairs.add(pair);
    for (const s of [down, up]) {
      s.on('error', () => {});
      s.on('close', () => {
        this.pairs.delete(pair);
        down.destroy();
        up.destroy();
      });
    }
    down.pipe(up);
    up.pipe(down);
  }

  /** Closes the connections forwarded for the host at `address`. */
  dropFrom(address: string): void {
    for (const { down, up } of this.pairs) {
      if (down.remoteAddress === address) {
        down.destroy();
        up.destroy();
      }
    }
  }

  close(): Promise<void> {
    for (const { down, up } of this.pairs) {
      down.destroy();
      up.destroy();
    }
    return new Promise((r) => this.server.close(() => r()));
  }
}

/** The worker hosts and their forwarders (see the module comment). */
export class SoakHosts {
  /** Forwarder port per loopback `host:port`. */
  private readonly ports = new Map<string, number>();
  private readonly timers = new Set<NodeJS.Timeout>();

  private constructor(
    private readonly net: HostNetwork,
    private readonly forwarders: Forwarder[],
  ) {}

  /**
   * One host per worker slot, and a forwarder for each loopback service in `env` (the database
   * and the fakes).
   * @throws when the network cannot be made (check `partitionUnavailable()` first).
   */
  static async start(slots: number, env: WorkerEnv): Promise<SoakHosts> {
    const net = await HostNetwork.create({ hosts: slots });
    const hosts = new SoakHosts(net, []);
    try {
      for (const key of URL_KEYS) {
        const u = new URL(env[key]);
        const target = `${u.hostname}:${u.port}`;
        if (hosts.ports.has(target)) continue;
        const fwd = await Forwarder.start(net.serverAddress, {
          host: u.hostname,
          port: Number(u.port),
        });
        hosts.forwarders.push(fwd);
        hosts.ports.set(target, fwd.port);
      }
      return hosts;
    } catch (err) {
      await hosts.close();
      throw err;
    }
  }

  /** `env` with its URLs pointing at the forwarders (what a host can reach). */
  envFor(env: WorkerEnv): WorkerEnv {
    const out = { ...env };
    for (const key of URL_KEYS) {
      const u = new URL(env[key]);
      const port = this.ports.get(`${u.hostname}:${u.port}`);
      if (port === undefined) continue;
      u.hostname = this.net.serverAddress;
      u.port = String(port);
      out[key] = u.toString();
    }
    return out;
  }

  /** The command prefix that runs slot `slot`'s worker in its host. */
  wrapFor(slot: number): string[] {
    return this.net.wrap(this.host(slot));
  }

  /** True while slot `slot`'s host is cut off. */
  isCut(slot: number): boolean {
    return this.host(slot).cut;
  }

  /** True while some host is cut off. */
  anyCut(): boolean {
    return this.net.hosts.some((h) => h.cut);
  }

  /** Cuts slot `slot`'s host off; its forwarded connections close `DEAD_CONNECTION_MS` later. */
  async cut(slot: number): Promise<void> {
    const host = this.host(slot);
    await this.net.cut(host);
    const timer = setTimeout(() => {
      this.timers.delete(timer);
      if (host.cut) for (const f of this.forwarders) f.dropFrom(host.address);
    }, DEAD_CONNECTION_MS);
    this.timers.add(timer);
  }

  heal(slot: number): Promise<void> {
    return this.net.heal(this.host(slot));
  }

  /** Heals every host (the end of the fault phase). */
  async healAll(): Promise<void> {
    for (const h of this.net.hosts) if (h.cut) await this.net.heal(h);
  }

  async close(): Promise<void> {
    for (const t of this.timers) clearTimeout(t);
    await Promise.all(this.forwarders.map((f) => f.close()));
    await this.net.close();
  }

  private host(slot: number): NetHost {
    const h = this.net.hosts[slot];
    if (!h) throw new Error(`no host for worker slot ${slot}`);
    return h;
  }
}

/** What one partition needs of the soak. */
export interface PartitionContext {
  hosts: SoakHosts;
  fleet: Fleet;
  admin: pg.Pool;
  journal: Journal;
  prng: Prng;
  leaseMs: number;
  /** `--max-recovery`: how long a healed worker has to start new work (ms). */
  maxRecoveryMs: number;
  /** When the fault phase ends: a partition must be healed well before (new work to take). */
  endsAt: number;
  /** Slots not to cut (stalled right now). */
  busy: ReadonlySet<number>;
  /** The steps leased to a worker and running. */
  heldBy(workerId: string): Promise<Orphan[]>;
  /** Keeps the heal, which goes on in the background, for `stop()` to wait for. */
  track(p: Promise<unknown>): void;
}

type PartitionRecord = Extract<FaultRecord, { kind: 'partition' }>;

/**
 * Cuts one worker's host off, heals it in the background and measures the takeover and the
 * recovery into the fault's record.
 * @returns false when no worker can be cut now (see the module comment), or none holds steps.
 */
export async function injectPartition(ctx: PartitionContext): Promise<boolean> {
  const { hosts, fleet, admin, journal, prng } = ctx;
  const live = fleet.live();
  const candidates = live.filter((w) => !ctx.busy.has(w.slot));
  if (live.length < 2 || candidates.length === 0 || hosts.anyCut()) return false;
  const cutMs = prng.int(3 * ctx.leaseMs, 4 * ctx.leaseMs);
  // Healed before the fault phase ends, while there is work to take, so its recovery is seen.
  if (Date.now() + cutMs + 2_000 > ctx.endsAt) return false;
  const { rows } = await admin.query<{ owner: string; n: number }>(
    `SELECT lease_owner AS owner, count(*)::int AS n FROM cyclone.cyclone_steps
     WHERE state = 'running' GROUP BY lease_owner`,
  );
  const held = new Map(rows.map((r) => [r.owner, r.n]));
  const w = [...candidates].sort(
    (a, b) => (held.get(b.workerId) ?? 0) - (held.get(a.workerId) ?? 0),
  )[0];
  if (!w || (held.get(w.workerId) ?? 0) === 0) return false;
  await hosts.cut(w.slot);
  const at = Date.now();
  const orphans = await ctx.heldBy(w.workerId);
  const record: PartitionRecord = {
    kind: 'partition',
    at,
    slot: w.slot,
    workerId: w.workerId,
    cutMs,
    orphans: orphans.length,
    takeoverMs: null,
    healedAt: null,
    recoveryMs: null,
    unmeasured: null,
  };
  journal.faults.push(record);
  // The measurements end by themselves (found, or given up after a few minutes); the heal is
  // what the end of the fault phase waits for.
  void measureTakeover(admin, orphans, at, record);
  ctx.track(
    (async () => {
      await new Promise((r) => setTimeout(r, cutMs));
      await hosts.heal(w.slot);
      record.healedAt = Date.now();
      void measureRecovery(journal, fleet, ctx.maxRecoveryMs, record, record.healedAt);
    })(),
  );
  return true;
}

/**
 * Sets `recoveryMs` once the worker started a handler after the heal (a claim of its own): the
 * time of that start, as the worker reported it, minus the heal's. When its process ended first
 * (killed, or stopped at the end of the soak) within `maxRecoveryMs` of the heal, the recovery
 * could not be seen and `unmeasured` says why; later than that it stays null, a failure: the
 * worker had its whole allowance and did not work. Waits at most two minutes.
 */
async function measureRecovery(
  journal: Journal,
  fleet: Fleet,
  maxRecoveryMs: number,
  record: PartitionRecord,
  healedAt: number,
): Promise<void> {
  const deadline = healedAt + 120_000;
  const seen = () => {
    const first = journal.firstStartAfter(record.workerId, healedAt);
    if (first === undefined) return false;
    record.recoveryMs = first - healedAt;
    return true;
  };
  while (Date.now() < deadline) {
    if (seen()) return;
    const exit = fleet.byWorkerId(record.workerId)?.exit;
    if (exit) {
      // Its last starts' messages come before its exit; read them once more.
      if (seen()) return;
      const after = exit.at - healedAt;
      if (after < maxRecoveryMs) {
        const killed = journal.losses.some(
          (l) => l.cause === 'kill' && l.workerId === record.workerId && l.at >= healedAt,
        );
        record.unmeasured = `its process was ${killed ? 'killed by the soak' : 'stopped at the end of the soak'} ${after} ms after the heal, before it started new work`;
      }
      return;
    }
    await new Promise((r) => setTimeout(r, 200));
  }
}

/**
 * True while `workerId` was healed from a partition less than `maxRecoveryMs` ago and has not
 * started new work since: a kill or a stall now would hide whether it recovers by itself.
 */
export function recoveringFromPartition(
  journal: Journal,
  workerId: string,
  maxRecoveryMs: number,
  now = Date.now(),
): boolean {
  return journal.faults.some(
    (f) =>
      f.kind === 'partition' &&
      f.workerId === workerId &&
      f.healedAt !== null &&
      f.recoveryMs === null &&
      f.unmeasured === null &&
      now < f.healedAt + maxRecoveryMs,
  );
}

/** Sets `takeoverMs` once every step held at the cut was claimed again or had ended. */
async function measureTakeover(
  admin: pg.Pool,
  orphans: Orphan[],
  at: number,
  record: PartitionRecord,
): Promise<void> {
  if (orphans.length === 0) {
    record.takeoverMs = 0;
    return;
  }
  const deadline = at + 180_000;
  while (Date.now() < deadline) {
    try {
      const { rows } = await admin.query<{ n: number }>(
        `SELECT count(*)::int AS n
         FROM unnest($1::uuid[], $2::text[], $3::int[]) AS o(run_id, node, attempt)
         JOIN cyclone.cyclone_steps s USING (run_id, node)
         WHERE s.state = 'running' AND s.attempt = o.attempt`,
        [orphans.map((o) => o.runId), orphans.map((o) => o.node), orphans.map((o) => o.attempt)],
      );
      if ((rows[0]?.n ?? 1) === 0) {
        record.takeoverMs = Date.now() - at;
        return;
      }
    } catch {
      // the server may be restarting: ask again
    }
    await new Promise((r) => setTimeout(r, 200));
  }
}
