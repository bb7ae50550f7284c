/**
 * One soak, start to end: the dedicated database (migrated: core, the ledger, the SendGrid and
 * Twilio tables, the business table), the provider fakes, the worker processes; then the fault
 * phase (load, chaos and the operator together for `durationMs`), the settle phase (no new runs
 * and no faults; the operator still settles unknown outcomes) until every run is terminal or
 * `settleMs` has passed; then the workers stop gracefully and the checker reads everything.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { resolve } from 'node:path';
import { Client } from '@cyclone/core';
import { migrateIdempotency } from '@cyclone/idempotency';
import { migrateSendgrid } from '@cyclone/sendgrid';
import { migrateTwilio } from '@cyclone/twilio';
import pg from 'pg';
import { Chaos } from './chaos.js';
import { check, type Report } from './checker.js';
import { openDatabase } from './database.js';
import { isReplicated, openReplicatedDatabase } from './failover.js';
import { type Fakes, startFakes } from './fakes.js';
import { Fleet } from './fleet.js';
import { Journal } from './journal.js';
import { Load } from './load.js';
import { Operator } from './operator.js';
import type { SoakOptions } from './options.js';
import { SoakHosts } from './partition.js';
import { startSoakPgBouncer } from './pgbouncer.js';
import { Prng } from './prng.js';
import type { WorkerEnv } from './protocol.js';
import { takeSnapshot } from './snapshot.js';
import { BUSINESS_DDL } from './workload.js';

/** The providers' client timeout in the workers (ms): faults answer slower than this. */
export const PROVIDER_TIMEOUT_MS = 1_500;

export interface SoakResult {
  report: Report;
  outDir: string;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function runSoak(
  options: SoakOptions,
  log: (line: string) => void,
): Promise<SoakResult> {
  const stamp = new Date().toISOString().replace(/[:.]/g, '-');
  const outDir = resolve(options.outDir ?? resolve('.cyclone/soak', stamp));
  await mkdir(outDir, { recursive: true });

  for (const note of options.notes) log(`soak: ${note}`);
  const db = options.faults.includes('failover')
    ? await openReplicatedDatabase(log)
    : await openDatabase(options.databaseUrl);
  log(
    isReplicated(db)
      ? `soak: ${db.description}`
      : db.owned
        ? `soak: dedicated embedded PostgreSQL at ${db.dataDir} (${new URL(db.url).port})`
        : 'soak: on the given database (no PostgreSQL restarts)',
  );
  const cleanups: (() => Promise<unknown>)[] = [() => db.close(options.keep)];
  let fleet: Fleet | undefined;
  const onExit = () => fleet?.killAll();
  process.once('exit', onExit);
  // Interrupted (Ctrl-C, a test's timeout): workers killed, the server stopped, then exit 130.
  const onSignal = (signal: NodeJS.Signals) => {
    log(`soak: ${signal}: stopping`);
    fleet?.killAll();
    void (async () => {
      for (const c of cleanups) await c().catch(() => {});
      process.exit(130);
    })();
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    const admin = new pg.Pool({ connectionString: db.urlFor('soak-admin'), max: 3 });
    admin.on('error', () => {});
    cleanups.unshift(() => admin.end());
    const client = new Client({ connectionString: db.urlFor('soak-orchestrator'), poolSize: 8 });
    cleanups.unshift(() => client.close());
    await migrateIdempotency(client);
    await migrateSendgrid(client);
    await migrateTwilio(client);
    await client.pool.query(BUSINESS_DDL);
    const existing = await client.pool.query<{ n: number }>(
      'SELECT count(*)::int AS n FROM cyclone.cyclone_runs',
    );
    if ((existing.rows[0]?.n ?? 0) > 0) {
      throw new Error('the database already has runs: the soak needs an empty one');
    }

    const fakes: Fakes = await startFakes(client.pool);
    cleanups.unshift(() => fakes.close());
    const journal = new Journal();
    const quietPeriodMs = Math.max(8_000, options.leaseMs + 2_000 + PROVIDER_TIMEOUT_MS + 2_000);
    // --pgbouncer: the workers through a PgBouncer of the soak's (pgbouncer.ts).
    const bouncer = options.pgbouncer
      ? await startSoakPgBouncer(db.url, options.workers, options.concurrency)
      : undefined;
    if (bouncer) {
      cleanups.unshift(() => bouncer.stop());
      log(`soak: workers through ${bouncer.version} (transaction pooling, port ${bouncer.port})`);
    }
    const envFor = (slot: number): WorkerEnv => ({
      SOAK_DATABASE_URL: bouncer
        ? bouncer.url(db.urlFor(`soak-w${slot}`))
        : db.urlFor(`soak-w${slot}`),
      ...(bouncer ? { SOAK_PGBOUNCER: '1' } : {}),
      SOAK_WORKER_INDEX: String(slot),
      SOAK_LEASE_MS: String(options.leaseMs),
      SOAK_CONCURRENCY: String(options.concurrency),
      SOAK_SWEEP_MS: String(options.sweepMs),
      SOAK_POLL_MS: '250',
      SOAK_PROVIDER_TIMEOUT_MS: String(PROVIDER_TIMEOUT_MS),
      SOAK_QUIET_PERIOD_MS: String(quietPeriodMs),
      ...(fakes.env as Pick<
        WorkerEnv,
        | 'SOAK_STRIPE_URL'
        | 'SOAK_STRIPE_KEY'
        | 'SOAK_SENDGRID_URL'
        | 'SOAK_SENDGRID_KEY'
        | 'SOAK_TWILIO_URL'
        | 'SOAK_TWILIO_SID'
        | 'SOAK_TWILIO_TOKEN'
      >),
    });
    // The partition fault: every worker on a host of its own (partition.ts).
    const hosts = options.faults.includes('partition')
      ? await SoakHosts.start(options.workers, envFor(0))
      : undefined;
    if (hosts) cleanups.unshift(() => hosts.close());
    fleet = new Fleet({
      slots: options.workers,
      logDir: outDir,
      envFor: hosts ? (slot) => hosts.envFor(envFor(slot)) : envFor,
      wrapFor: hosts ? (slot) => hosts.wrapFor(slot) : undefined,
      onMessage: (w, m) => {
        if (m.t === 'start') {
          journal.recordStart(m.runId, m.node, {
            attempt: m.attempt,
            at: m.at,
            workerId: w.workerId,
          });
        }
      },
    });
    const theFleet = fleet;
    cleanups.unshift(async () => theFleet.killAll());
    await fleet.start();
    log(`soak: ${options.workers} workers ready; logs in ${outDir}`);

    const load = new Load(client, journal, new Prng(options.seed), {
      rate: options.rate,
      maxRuns: options.runs,
      declineShare: 0.04,
      longStepMs: Math.round(options.leaseMs * 1.5),
    });
    const chaos = new Chaos(db, admin, fleet, fakes, journal, new Prng(options.seed ^ 0x5eed), {
      kinds: options.faults,
      durationMs: options.durationMs,
      faultEveryMs: options.faultEveryMs,
      pgRestartEveryMs: options.pgRestartEveryMs,
      failoverEveryMs: options.failoverEveryMs,
      leaseMs: options.leaseMs,
      maxRecoveryMs: options.maxRecoveryMs,
      providerTimeoutMs: PROVIDER_TIMEOUT_MS,
      bouncer,
      hosts,
    });
    const operator = new Operator(client, fakes, journal);

    const startedAt = Date.now();
    load.start();
    chaos.start();
    operator.start();
    const progress = setInterval(() => {
      const n = journal.faults.length;
      log(
        `soak: ${Math.round((Date.now() - startedAt) / 1000)} s: ${journal.submitted.size} runs submitted, ${n} faults, ${journal.operator.length} operator actions`,
      );
    }, 15_000);
    try {
      const until = startedAt + options.durationMs;
      while (Date.now() < until && load.asked < options.runs) await sleep(200);
      await load.stop();
      await chaos.stop();
    } finally {
      clearInterval(progress);
    }
    const faultPhaseEndedAt = Date.now();
    log(
      `soak: fault phase over (${journal.submitted.size} runs, ${journal.faults.length} faults); settling`,
    );

    // Settle: no new runs, no faults; wait for every run to end.
    const settleUntil = faultPhaseEndedAt + options.settleMs;
    let lastLog = 0;
    for (;;) {
      let running = -1;
      let backlog = -1;
      try {
        const r = await client.pool.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM cyclone.cyclone_runs WHERE state = 'running'`,
        );
        running = r.rows[0]?.n ?? 0;
        backlog = await operator.backlog();
      } catch {
        // a connection lost in the last restart: ask again
      }
      if (running === 0 && backlog === 0) break;
      if (Date.now() >= settleUntil) break;
      if (Date.now() - lastLog > 10_000) {
        lastLog = Date.now();
        log(`soak: settling: ${running} runs running, ${backlog} steps waiting for the operator`);
      }
      await sleep(500);
    }
    await operator.stop();
    await fleet.stop();
    await fakes.flushEvents();

    const snapshot = await takeSnapshot({
      pool: client.pool,
      fakes,
      fleet,
      journal,
      options,
      asked: load.asked,
      leftAlone: operator.leftAlone,
      startedAt,
      faultPhaseEndedAt,
    });
    const report = check(snapshot);
    await writeFile(resolve(outDir, 'report.json'), `${JSON.stringify(report, null, 2)}\n`);
    return { report, outDir };
  } finally {
    for (const c of cleanups) await c().catch(() => {});
    process.removeListener('exit', onExit);
    process.removeListener('SIGINT', onSignal);
    process.removeListener('SIGTERM', onSignal);
  }
}
