/**
 * The worker child process of the browser tests: a real `Worker` running the flows (flows.ts) on
 * the test file's database, spawned by `spawnWorker` (`node --conditions=@cyclone/source --import
 * tsx ui-worker.ts`). Environment: DATABASE_URL. Stdout: `READY <pid> <workerId>`.
 */
import { Client, Worker } from '@cyclone/core';
import { announceReady, requireEnv } from '@cyclone/testkit';
import { ALL_FLOWS, flowsPool, HourlyReport } from './flows.js';

const url = requireEnv('DATABASE_URL');
flowsPool(url);
// The report flow's output is 5 MB: over the 1 MB default, as a user with big outputs would set.
const client = new Client({ connectionString: url, poolSize: 6, maxPayloadBytes: 8 * 1024 * 1024 });
const worker = new Worker({
  client,
  workflows: ALL_FLOWS,
  schedules: [HourlyReport],
  concurrency: 8,
  pollIntervalMs: 100,
});
await worker.start();
announceReady(worker.workerId);

const stop = async () => {
  await worker.stop();
  await client.close();
  process.exit(0);
};
process.once('SIGTERM', stop);
process.once('SIGINT', stop);
