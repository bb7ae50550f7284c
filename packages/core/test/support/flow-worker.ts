/**
 * A worker process of the flow-control tests (spawned by flow-control.processes.test.ts):
 * `node --conditions=@cyclone/source --import tsx flow-worker.ts`. Runs every workflow of
 * flow-workflows.ts. Environment: DATABASE_URL, FLOW_CONCURRENCY, FLOW_BATCH, FLOW_LEASE_MS,
 * FLOW_SWEEP_MS, FLOW_POLL_MS. Stdout: `READY <pid> <workerId>`, then `HANG <runId>` lines.
 */
import { Client, consoleLogger, Worker } from '@cyclone/core';
import { announceReady, emitLine, envNumber, requireEnv } from '@cyclone/testkit';
import pg from 'pg';
import { configureFlow, FLOW_WORKFLOWS } from './flow-workflows.js';

const url = requireEnv('DATABASE_URL');
const pool = new pg.Pool({ connectionString: url, max: 8 });
pool.on('error', () => {});
configureFlow(pool, emitLine);

const client = new Client({ connectionString: url, poolSize: 8 });
const worker = new Worker({
  client,
  workflows: [...FLOW_WORKFLOWS],
  concurrency: envNumber('FLOW_CONCURRENCY', 20),
  claimBatchSize: envNumber('FLOW_BATCH', 100),
  leaseMs: envNumber('FLOW_LEASE_MS', 2000),
  sweepIntervalMs: envNumber('FLOW_SWEEP_MS', 500),
  pollIntervalMs: envNumber('FLOW_POLL_MS', 200),
  logger: consoleLogger('warn', { pid: process.pid }),
});

process.on('SIGTERM', () => {
  void (async () => {
    await worker.stop({ graceMs: 2_000 });
    await client.close();
    await pool.end();
    process.exit(0);
  })();
});

await worker.start();
announceReady(worker.workerId);
