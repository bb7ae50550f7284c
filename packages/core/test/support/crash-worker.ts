/**
 * A child worker process of the crash tests (spawned by child.ts, never imported by tests):
 * `node --conditions=@cyclone/source --import tsx crash-worker.ts`.
 *
 * Environment: DATABASE_URL (the test file's database, directly or through PgBouncer with
 * CYCLONE_TEST_VIA, @cyclone/testkit's via.ts), CRASH_VICTIM=1 to stop at the run's
 * crash point, CRASH_LEASE_MS, CRASH_SWEEP_MS, CRASH_POLL_MS.
 * Stdout protocol (one line each): `READY <pid> <workerId>` once the worker runs, then the
 * handlers' lines (crash-workflows.ts), `STOPPED` after a SIGTERM-initiated graceful stop.
 */
import { Client, consoleLogger, Worker } from '@cyclone/core';
import {
  announceReady,
  emitLine,
  engineClientOptions,
  engineWorkerOptions,
  envNumber,
  requireEnv,
} from '@cyclone/testkit';
import pg from 'pg';
import { CRASH_WORKFLOWS, configureCrash } from './crash-workflows.js';

const url = requireEnv('DATABASE_URL');

const pool = new pg.Pool({ connectionString: url, max: 4 });
pool.on('error', () => {});
configureCrash({
  pool,
  emit: emitLine,
  victim: process.env.CRASH_VICTIM === '1',
  allowSelfKill: true,
});

const client = new Client({ connectionString: url, poolSize: 4, ...engineClientOptions });
const worker = new Worker({
  client,
  workflows: [...CRASH_WORKFLOWS],
  concurrency: 4,
  leaseMs: envNumber('CRASH_LEASE_MS', 1000),
  sweepIntervalMs: envNumber('CRASH_SWEEP_MS', 250),
  pollIntervalMs: envNumber('CRASH_POLL_MS', 100),
  logger: consoleLogger('warn', { pid: process.pid }),
  ...engineWorkerOptions,
});

let stopping = false;
process.on('SIGTERM', () => {
  if (stopping) return;
  stopping = true;
  const force = setTimeout(() => {
    emitLine('STOP_TIMEOUT');
    process.exit(1);
  }, 10_000);
  void (async () => {
    await worker.stop({ graceMs: 5_000 });
    await client.close();
    await pool.end();
    clearTimeout(force);
    emitLine('STOPPED');
    process.exit(0);
  })();
});

await worker.start();
announceReady(worker.workerId);
