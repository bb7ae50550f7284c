/**
 * A child worker process of timer.crash.test.ts (spawned with @cyclone/testkit's `spawnWorker`,
 * never imported by tests): `node --conditions=@cyclone/source --import tsx timer-worker.ts`.
 *
 * Environment: DATABASE_URL (the test's own embedded server).
 * Stdout protocol (one line each): `READY <pid> <workerId>` once the worker runs, then `A <runId>
 * <pid>` and `B <runId> <pid>` from the handlers (timer-workflow.ts). It is only ever SIGKILLed.
 */
import { Client, consoleLogger, Worker } from '@cyclone/core';
import { announceReady, emitLine, requireEnv } from '@cyclone/testkit';
import pg from 'pg';
import { configureTimer, TimerFlow, WaitFlow } from './timer-workflow.js';

const url = requireEnv('DATABASE_URL');
const pool = new pg.Pool({ connectionString: url, max: 2 });
pool.on('error', () => {});
configureTimer({ pool, emit: emitLine });

const client = new Client({ connectionString: url, poolSize: 3 });
const worker = new Worker({
  client,
  workflows: [TimerFlow, WaitFlow],
  concurrency: 4,
  leaseMs: 2_000,
  sweepIntervalMs: 250,
  pollIntervalMs: 200,
  logger: consoleLogger('warn', { pid: process.pid }),
});

await worker.start();
announceReady(worker.workerId);
