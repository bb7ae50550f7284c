/**
 * A child worker process of the crash tests (spawned by crash.test.ts):
 * `node --conditions=@cyclone/source --import tsx crash-mail-worker.ts`.
 * Environment: DATABASE_URL, SENDGRID_BASE_URL (the fake), CRASH_LEASE_MS.
 * Stdout: `READY <pid> <workerId>`, then the handler's `SENDING`/`SENT` lines.
 */
import { emitLine, requireEnv } from '@cyclone/testkit';
import { startChildWorker } from '@cyclone/testkit-engine';
import { createMailService } from '../../src/index.js';
import { CrashMailFlow, configureCrashMail } from './crash-mail.js';

configureCrashMail({
  mail: createMailService({
    apiKey: 'SG.test',
    baseUrl: requireEnv('SENDGRID_BASE_URL'),
    timeoutMs: 5_000,
  }),
  emit: emitLine,
  victim: true,
});
await startChildWorker({ workflows: [CrashMailFlow], sweepIntervalMs: 200 });
