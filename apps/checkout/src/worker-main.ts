/**
 * A worker process: `pnpm --filter @cyclone/example-checkout worker`. Start as many as you like,
 * on any host that reaches the database; they share the work through PostgreSQL only.
 *
 * Database: DATABASE_URL, else the embedded PostgreSQL under `.cyclone/` (reused when the API
 * or the demo runs it). Providers: see providers.ts (the real services when their keys are set,
 * else the fakes). Prints `READY <pid> <workerId>` on stdout once it claims work; SIGTERM or
 * SIGINT stops it gracefully (in-flight steps finish).
 *
 * It carries the payment reconciliation's cron schedule (reconcile.ts), like every worker.
 * CHECKOUT_TIMINGS=demo shortens the waits (workflow.ts `Timings`); the API must have the same.
 * WORKER_CONCURRENCY (default 10) and WORKER_LEASE_MS (default 5,000) tune it; the demo uses
 * short leases so that a killed worker's steps come back within seconds. OpenTelemetry: see
 * telemetry.ts (off unless an OTEL_* exporter is configured).
 */
// First: the OpenTelemetry SDK, when configured, must be registered before anything else loads.
import './telemetry.js';
import { Client, consoleLogger, Worker } from '@cyclone/core';
import { resolveDatabase } from './db.js';
import { providersFromEnv } from './providers.js';
import { reconcileSchedule, reconcileWorkflow } from './reconcile.js';
import { migrateCheckout } from './schema.js';
import { telemetry } from './telemetry.js';
import { checkoutWorkflow, timingsFromEnv } from './workflow.js';

const num = (name: string, def: number) => {
  const v = Number(process.env[name] ?? def);
  if (!Number.isFinite(v) || v <= 0) throw new Error(`${name} must be a positive number`);
  return v;
};

const db = await resolveDatabase();
const logger = consoleLogger((process.env.WORKER_LOG_LEVEL as 'warn' | undefined) ?? 'warn', {
  pid: process.pid,
});
const client = new Client({ connectionString: db.connectionString, logger, poolSize: 4 });
await migrateCheckout(client);
const providers = providersFromEnv();
const leaseMs = num('WORKER_LEASE_MS', 5_000);
const timings = timingsFromEnv();
const reconcile = reconcileWorkflow(providers, timings);
const worker = new Worker({
  client,
  workflows: [checkoutWorkflow(providers, timings), reconcile],
  // Every worker carries it: each fire time still makes exactly one run.
  schedules: [reconcileSchedule(reconcile, timings)],
  concurrency: num('WORKER_CONCURRENCY', 10),
  leaseMs,
  sweepIntervalMs: Math.max(250, Math.round(leaseMs / 4)),
  pollIntervalMs: 500,
});
let stopping = false;
async function shutdown(): Promise<void> {
  if (stopping) return;
  stopping = true;
  await worker.stop({ graceMs: 5_000 });
  await client.close();
  await telemetry?.shutdown();
  await db.stop();
  process.exit(0);
}
// Before READY: without a listener, a SIGTERM that comes right after it would kill the process
// at once (the default action) instead of stopping it gracefully.
process.on('SIGTERM', () => void shutdown());
process.on('SIGINT', () => void shutdown());

await worker.start();
for (const line of [...providers.describe, ...(telemetry?.describe ?? [])]) {
  process.stderr.write(`worker ${process.pid}: ${line}\n`);
}
process.stdout.write(`READY ${process.pid} ${worker.workerId}\n`);
if (process.env.EXIT_WITH_PARENT === '1') {
  // Started by the demo: stop when it goes away (it holds our stdin).
  process.stdin.on('end', () => void shutdown());
  process.stdin.resume();
}
