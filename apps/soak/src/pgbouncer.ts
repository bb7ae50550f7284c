/**
 * The soak through PgBouncer (`--pgbouncer`) and its fault (`pgbouncer`). With `--pgbouncer` the
 * worker processes reach PostgreSQL through a PgBouncer the soak starts (Debian's package, in
 * transaction pooling mode, `@cyclone/testkit`'s `startPgBouncer`) in front of the soak's
 * database, with the settings docs/operations.md gives for it: no named prepared statements and
 * no LISTEN (the workers poll). The orchestrator, its operator and the checker stay direct.
 *
 * One `pgbouncer` fault, the two modes taking turns:
 * - `kill`: PgBouncer SIGKILLed, down 0.3–1.5 s, then started again on the same port: every
 *   worker connection drops at once, open transactions included (a pooler crash or redeploy);
 * - `reconnect`: the console's RECONNECT: each server connection is closed once its transaction
 *   ends and new ones are opened (a pooler repointed or reloaded); the workers' connections stay.
 *
 * Measured in the background: the recovery, from PgBouncer back (restarted, or the command
 * done) until every worker that was working at the fault (alive, not stalled, not cut off) and
 * still is has started a handler again.
 */
import { type PgBouncer, pgbouncerVersion, startPgBouncer } from '@cyclone/testkit';
import type pg from 'pg';
import type { Fleet } from './fleet.js';
import type { FaultRecord, Journal } from './journal.js';
import type { Prng } from './prng.js';

/** One `pgbouncer` fault as the journal keeps it. */
type PgBouncerFault = Extract<FaultRecord, { kind: 'pgbouncer' }>;

/** Why the soak cannot run through PgBouncer here (not installed), or undefined. */
export function pgbouncerUnavailable(): string | undefined {
  return pgbouncerVersion() === undefined
    ? 'pgbouncer is not installed (apt-get install -y pgbouncer)'
    : undefined;
}

/**
 * Starts the soak's PgBouncer in front of `serverUrl`, with room for every worker's connections
 * (`workers` × (`concurrency` + 4) server connections, at most 80) and a short wait after a
 * failed server login (a restarted PostgreSQL).
 */
export function startSoakPgBouncer(
  serverUrl: string,
  workers: number,
  concurrency: number,
): Promise<PgBouncer> {
  return startPgBouncer({
    serverUrl,
    poolSize: Math.min(80, workers * (concurrency + 4)),
  });
}

/** What one `pgbouncer` fault needs of the soak. */
export interface PgBouncerFaultContext {
  bouncer: PgBouncer;
  fleet: Fleet;
  admin: pg.Pool;
  journal: Journal;
  prng: Prng;
  /** True when slot `slot`'s worker can work now (not stalled, not cut off). */
  working(slot: number): boolean;
  /** Keeps a background task (the restart) for the end of the fault phase to wait for. */
  track(p: Promise<unknown>): void;
}

let nextMode: PgBouncerFault['mode'] = 'kill';

/**
 * Injects one `pgbouncer` fault (see the module comment) and measures its recovery into the
 * fault's record in the background.
 * @returns false when no worker is working to measure the recovery by.
 */
export async function injectPgBouncerFault(ctx: PgBouncerFaultContext): Promise<boolean> {
  const { bouncer, fleet, admin, journal, prng } = ctx;
  const counted = fleet.live().filter((w) => ctx.working(w.slot));
  if (counted.length === 0) return false;
  const mode = nextMode;
  nextMode = mode === 'kill' ? 'reconnect' : 'kill';
  const held = await admin
    .query<{ n: number }>(
      `SELECT count(*)::int AS n FROM cyclone.cyclone_steps WHERE state = 'running'`,
    )
    .then((r) => r.rows[0]?.n ?? 0)
    .catch(() => -1);
  const record: PgBouncerFault = {
    kind: 'pgbouncer',
    at: Date.now(),
    mode,
    downMs: 0,
    held,
    workers: counted.length,
    recoveryMs: null,
  };
  journal.faults.push(record);
  const ids = new Set(counted.map((w) => w.workerId));
  if (mode === 'reconnect') {
    await bouncer.admin('RECONNECT');
    void measureRecovery(ctx, ids, Date.now(), record);
    return true;
  }
  await bouncer.kill('SIGKILL');
  const downMs = prng.int(300, 1_500);
  ctx.track(
    (async () => {
      await new Promise((r) => setTimeout(r, downMs));
      await bouncer.restart();
      record.downMs = Date.now() - record.at;
      void measureRecovery(ctx, ids, Date.now(), record);
    })(),
  );
  return true;
}

/**
 * Sets `recoveryMs` once each worker of `ids` still alive and working has started a handler
 * after `backAt`. Waits at most two minutes; null means some never did.
 */
async function measureRecovery(
  ctx: PgBouncerFaultContext,
  ids: ReadonlySet<string>,
  backAt: number,
  record: PgBouncerFault,
): Promise<void> {
  const deadline = backAt + 120_000;
  while (Date.now() < deadline) {
    const waiting = ctx.fleet
      .live()
      .filter((w) => ids.has(w.workerId) && ctx.working(w.slot))
      .filter((w) => !startedSince(ctx.journal, w.workerId, backAt));
    if (waiting.length === 0) {
      record.recoveryMs = Date.now() - backAt;
      return;
    }
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** True when `workerId` reported a handler start after `since` (lists in arrival order). */
function startedSince(journal: Journal, workerId: string, since: number): boolean {
  for (const list of journal.starts.values()) {
    for (let i = list.length - 1; i >= 0; i--) {
      const e = list[i];
      if (!e || e.at <= since) break;
      if (e.workerId === workerId) return true;
    }
  }
  return false;
}
