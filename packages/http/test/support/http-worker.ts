/**
 * A child worker process of the crash tests (spawned by crash.test.ts through `crashSuite`):
 * `node --conditions=@cyclone/source --import tsx http-worker.ts`.
 *
 * Environment: DATABASE_URL (the test file's database), FAKE_HTTP_URL (the parent's fake API),
 * CRASH_VICTIM=1 to stop after the call, CRASH_LEASE_MS.
 * Stdout: `READY <pid> <workerId>`, then the handler's lines (crash-flows.ts).
 */
import { emitLine, requireEnv } from '@cyclone/testkit';
import { startChildWorker } from '@cyclone/testkit-engine';
import { CrashShip, configureCrash } from './crash-flows.js';

configureCrash({
  baseUrl: requireEnv('FAKE_HTTP_URL'),
  emit: emitLine,
  victim: process.env.CRASH_VICTIM === '1',
});

await startChildWorker({ workflows: [CrashShip] });
