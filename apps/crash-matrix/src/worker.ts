/**
 * One worker process of the crash matrix, started by main.ts (never run by hand):
 * `VICTIM=1` makes its handlers stop at their scenario's point. Leases of `LEASE_MS` (1 s),
 * a recovery sweep every `SWEEP_MS` (250 ms).
 *
 * Stdout, one line each: `READY <pid> <workerId>` once it claims work, the handlers' lines
 * (`BEFORE_EFFECT <runId> <node> <attempt>`, …), `STOPPED` after a SIGTERM's graceful stop.
 * Stderr: the worker's warnings (e.g. "completion fenced out").
 */
import { Client, consoleLogger, Worker } from '@cyclone/core';
import pg from 'pg';
import { ENGINE_SCHEMA, OneStep, TwoSteps, useProbe } from './workflows.js';

const url = process.env.DATABASE_URL;
if (!url) throw new Error('DATABASE_URL is required');
const emit = (line: string) => process.stdout.write(`${line}\n`);

const pool = new pg.Pool({ connectionString: url, max: 2 });
pool.on('error', () => {});
useProbe({ pool, emit, victim: process.env.VICTIM === '1' });

const client = new Client({ connectionString: url, schema: ENGINE_SCHEMA, poolSize: 2 });
const worker = new Worker({
  client,
  workflows: [OneStep, TwoSteps],
  concurrency: 2,
  leaseMs: Number(process.env.LEASE_MS ?? 1_000),
  sweepIntervalMs: Number(process.env.SWEEP_MS ?? 250),
  pollIntervalMs: 50,
  logger: consoleLogger('warn', { pid: process.pid }),
});

process.on('SIGTERM', () => {
  void (async () => {
    await worker.stop({ graceMs: 5_000 });
    await client.close();
    await pool.end();
    emit('STOPPED');
    process.exit(0);
  })();
});
// The parent going away closes stdin: do not outlive it.
process.stdin.on('end', () => process.exit(1));
process.stdin.resume();

await worker.start();
emit(`READY ${process.pid} ${worker.workerId}`);
