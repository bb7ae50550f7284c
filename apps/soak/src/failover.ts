/**
 * The `failover` fault. With it on, the soak's database is a primary with a synchronous
 * streaming standby (`@cyclone/testkit/replication`: PostgreSQL's own server binaries, each
 * server on a free port in a temporary directory), and everything — workers, load, operator,
 * webhook, checker — reaches it through one address that moves to the new primary (a TCP proxy
 * the soak owns, as HAProxy on Patroni or a DNS switch would be in production).
 *
 * One failover: the running steps are counted; every process of the primary is SIGKILLed (the
 * proxy resets the sessions left and refuses new ones); after a detection delay of 0.5–2 s the
 * standby is promoted and the address moves to it; the old primary is never started again (no
 * split brain). Then, in the background, the time until a step completes on the new primary is
 * measured (the recovery time), and a new synchronous standby is built from the new primary
 * (`pg_basebackup`); until it is in sync, no other failover is injected, since one then could
 * lose acknowledged commits. A `pg-restart` on this database restarts the current primary.
 */
import { postgresBinDir, ReplicatedCluster } from '@cyclone/testkit/replication';
import type pg from 'pg';
import type { RestartMode, SoakDatabase } from './database.js';
import type { FaultRecord, Journal } from './journal.js';
import type { Prng } from './prng.js';

/** A soak database that can fail over (see the module comment). */
export interface ReplicatedSoakDatabase extends SoakDatabase {
  readonly replicated: true;
  /** One line saying what it is, for the soak's log. */
  readonly description: string;
  /** True when a synchronous standby is in sync and no failover, restart or rebuild runs. */
  readonly canFailOver: boolean;
  /** True when no failover, restart or rebuild runs. */
  readonly quiet: boolean;
  /**
   * Fails over: kills the primary, waits `detectionMs`, promotes the standby, moves the address;
   * then rebuilds a standby in the background.
   * @returns the failover's times, and `rebuilt`, resolving with the rebuild's duration (ms).
   */
  failover(detectionMs: number): Promise<{
    killedAt: number;
    promotedAt: number;
    switchedAt: number;
    from: string;
    to: string;
    rebuilt: Promise<number>;
  }>;
  /** Resolves when no rebuild or failover is in progress. */
  idle(): Promise<void>;
}

/** Narrows a soak database to one that can fail over. */
export function isReplicated(db: SoakDatabase): db is ReplicatedSoakDatabase {
  return (db as Partial<ReplicatedSoakDatabase>).replicated === true;
}

/**
 * Why the `failover` fault cannot run here (no PostgreSQL server binaries with pg_basebackup),
 * or undefined when it can.
 */
export function failoverUnavailable(): string | undefined {
  const found = postgresBinDir();
  return 'reason' in found ? found.reason : undefined;
}

/** Builds the replicated pair and wraps it as the soak's database. */
export async function openReplicatedDatabase(
  log: (line: string) => void,
): Promise<ReplicatedSoakDatabase> {
  const cluster = await ReplicatedCluster.start({ log: (line) => log(`soak: ${line}`) });
  // One change to the pair at a time: a restart, a failover, a standby being rebuilt.
  let chain: Promise<unknown> = Promise.resolve();
  let busy = 0;
  const exclusive = <T>(fn: () => Promise<T>): Promise<T> => {
    busy++;
    const next = chain.then(fn).finally(() => busy--);
    chain = next.catch(() => {});
    return next;
  };
  const url = cluster.url();
  return {
    replicated: true,
    url,
    owned: true,
    dataDir: cluster.baseDir,
    description: `a primary with a synchronous standby (PostgreSQL server binaries) in ${cluster.baseDir}, reached at 127.0.0.1:${cluster.proxy.port}`,
    urlFor: (name) => cluster.url('postgres', name),
    get canFailOver() {
      return busy === 0 && cluster.standby !== undefined && cluster.primary !== undefined;
    },
    get quiet() {
      return busy === 0;
    },
    restart: (mode: RestartMode, downMs: number) =>
      exclusive(() => cluster.restartPrimary(mode, downMs)),
    async failover(detectionMs) {
      const from = cluster.primary?.name ?? '?';
      const times = await exclusive(() => cluster.failover({ detectionMs }));
      const rebuilt = exclusive(async () => {
        const t0 = Date.now();
        await cluster.addStandby();
        return Date.now() - t0;
      });
      rebuilt.catch((err) => log(`soak: standby rebuild failed: ${String(err)}`));
      return { ...times, from, to: times.primary, rebuilt };
    },
    idle: async () => {
      while (busy > 0) await chain;
    },
    async close(keep = false) {
      await chain;
      await cluster.close({ keepFiles: keep });
    },
  };
}

/** What a `failover` fault needs from the chaos loop. */
export interface FailoverContext {
  db: ReplicatedSoakDatabase;
  admin: pg.Pool;
  journal: Journal;
  prng: Prng;
  /** Registers background work the chaos loop waits for at its end. */
  track(p: Promise<unknown>): void;
}

type FailoverRecord = Extract<FaultRecord, { kind: 'failover' }>;

/**
 * Injects one failover (see the module comment) and records it; its recovery time and the
 * standby's rebuild time are filled in when known.
 * @returns false when the pair cannot fail over now (no standby in sync yet).
 */
export async function injectFailover(c: FailoverContext): Promise<boolean> {
  if (!c.db.canFailOver) return false;
  const held = await c.admin
    .query<{ n: number }>(
      `SELECT count(*)::int AS n FROM cyclone.cyclone_steps WHERE state = 'running'`,
    )
    .then((r) => r.rows[0]?.n ?? 0)
    .catch(() => -1);
  const detectionMs = c.prng.int(500, 2_000);
  const f = await c.db.failover(detectionMs);
  const record: FailoverRecord = {
    kind: 'failover',
    at: f.killedAt,
    from: f.from,
    to: f.to,
    detectionMs,
    downMs: f.switchedAt - f.killedAt,
    held,
    recoveryMs: null,
    standbyMs: null,
  };
  c.journal.faults.push(record);
  c.track(
    f.rebuilt.then(
      (ms) => {
        record.standbyMs = ms;
      },
      () => {},
    ),
  );
  c.track(
    firstCompletionAfter(c.admin, f.killedAt).then((at) => {
      if (at !== undefined) record.recoveryMs = Math.max(0, at - f.killedAt);
    }),
  );
  return true;
}

/**
 * When (epoch ms, the server's clock: the same host's) the first step completed after `since`,
 * polled for up to 120 s; undefined if none did.
 */
async function firstCompletionAfter(admin: pg.Pool, since: number): Promise<number | undefined> {
  const deadline = Date.now() + 120_000;
  while (Date.now() < deadline) {
    try {
      const { rows } = await admin.query<{ at: number | null }>(
        `SELECT (extract(epoch FROM min(completed_at)) * 1000)::float8 AS at
         FROM cyclone.cyclone_steps WHERE completed_at > to_timestamp($1::float8 / 1000)`,
        [since],
      );
      const at = rows[0]?.at;
      if (at !== null && at !== undefined) return at;
    } catch {
      // the address may not lead anywhere yet
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return undefined;
}
