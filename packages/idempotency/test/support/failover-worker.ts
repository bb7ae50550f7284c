/**
 * A worker process of the failover test (spawned by failover.test.ts, never imported by tests):
 * `node --conditions=@cyclone/source --import tsx failover-worker.ts`. Environment:
 * DATABASE_URL (the cluster's moving address), PROVIDER_URL, WORKER_LABEL, CRASH_LEASE_MS.
 * Stdout: `READY <pid> <workerId>` once the worker runs.
 */
import { requireEnv } from '@cyclone/testkit';
import { startChildWorker } from '@cyclone/testkit-engine';
import { configureFailover, FailoverFlow } from './failover-flows.js';

configureFailover({ providerUrl: requireEnv('PROVIDER_URL'), worker: requireEnv('WORKER_LABEL') });

await startChildWorker({
  workflows: [FailoverFlow],
  concurrency: 4,
  pollIntervalMs: 100,
  sweepIntervalMs: 250,
});
