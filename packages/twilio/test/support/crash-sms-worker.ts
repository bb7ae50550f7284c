/**
 * A child worker process of the crash tests (spawned by crash.test.ts):
 * `node --conditions=@cyclone/source --import tsx crash-sms-worker.ts`.
 * Environment: DATABASE_URL, TWILIO_FAKE_ORIGIN, TWILIO_FAKE_SID, TWILIO_FAKE_TOKEN,
 * CRASH_LEASE_MS. Stdout: `READY <pid> <workerId>`, then the handler's `SENDING`/`SENT` lines.
 */
import { emitLine, requireEnv } from '@cyclone/testkit';
import { startChildWorker } from '@cyclone/testkit-engine';
import twilio from 'twilio';
import { LoopbackRequestClient } from '../../src/testing/index.js';
import { CrashSmsFlow, configureCrashSms } from './crash-sms.js';

configureCrashSms({
  twilio: twilio(requireEnv('TWILIO_FAKE_SID'), requireEnv('TWILIO_FAKE_TOKEN'), {
    httpClient: new LoopbackRequestClient(requireEnv('TWILIO_FAKE_ORIGIN'), { timeout: 5_000 }),
  }),
  emit: emitLine,
  victim: true,
});
await startChildWorker({ workflows: [CrashSmsFlow], sweepIntervalMs: 200 });
