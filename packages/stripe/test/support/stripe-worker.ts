/**
 * A child worker process of the crash tests (spawned by crash.test.ts through `crashSuite`):
 * `node --conditions=@cyclone/source --import tsx stripe-worker.ts`.
 *
 * Environment: DATABASE_URL (the test file's database), FAKE_STRIPE_PORT (the parent's fake),
 * CRASH_VICTIM=1 to stop after the charge, CRASH_LEASE_MS.
 * Stdout: `READY <pid> <workerId>`, then the handler's lines (crash-flows.ts).
 */
import { emitLine, requireEnv } from '@cyclone/testkit';
import { startChildWorker } from '@cyclone/testkit-engine';
import Stripe from 'stripe';
import { CrashCharge, configureCrash } from './crash-flows.js';

configureCrash({
  stripe: new Stripe('sk_test_fake', {
    host: '127.0.0.1',
    port: Number(requireEnv('FAKE_STRIPE_PORT')),
    protocol: 'http',
    telemetry: false,
    maxNetworkRetries: 0,
  }),
  emit: emitLine,
  victim: process.env.CRASH_VICTIM === '1',
});

await startChildWorker({ workflows: [CrashCharge] });
