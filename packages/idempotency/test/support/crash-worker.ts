/**
 * A child worker process of the crash tests (spawned by once.crash.test.ts, never imported by
 * tests): `node --conditions=@cyclone/source --import tsx crash-worker.ts`.
 * Environment: DATABASE_URL, PROVIDER_URL, CRASH_VICTIM=1 to stop after the provider call,
 * CRASH_LEASE_MS. Stdout: `READY <pid> <workerId>` once the worker runs, then the handler's lines.
 */
import { emitLine, requireEnv } from '@cyclone/testkit';
import { startChildWorker } from '@cyclone/testkit-engine';
import { ChargeFlow, configureCrash } from './crash-flows.js';

configureCrash({
  providerUrl: requireEnv('PROVIDER_URL'),
  victim: process.env.CRASH_VICTIM === '1',
  emit: emitLine,
});

await startChildWorker({ workflows: [ChargeFlow] });
