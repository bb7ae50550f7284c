/**
 * Crash tests with real worker processes (crash-mail-worker.ts) SIGKILLed at precise points of a
 * guarded send, and an in-process rescuer worker that picks the step up after the lease expires
 * (the scenarios of @cyclone/testkit-engine's `crashSuite`).
 */
import { getLedgerEntry } from '@cyclone/idempotency';
import { crashSuite } from '@cyclone/testkit-engine';
import { expect } from 'vitest';
import { FakeSendGrid } from '../src/testing/index.js';
import { CrashMailFlow, configureCrashMail } from './support/crash-mail.js';
import { createTestDb } from './support/db.js';

crashSuite({
  provider: 'SendGrid',
  call: 'send',
  workflow: CrashMailFlow,
  refPattern: '\\S+',
  script: new URL('./support/crash-mail-worker.ts', import.meta.url),
  input: { to: 'ada@example.com', onUnknown: 'fail' },
  createTestDb,
  startFake: async () => {
    const fake = await FakeSendGrid.start();
    configureCrashMail({ mail: fake.mailService(), emit: () => {}, victim: false });
    return fake;
  },
  childEnv: (fake) => ({ SENDGRID_BASE_URL: fake.baseUrl }),
  firstRef: (fake) => fake.sent[0]?.messageId,
  performed: (fake) => fake.effects === 1,
  expectOneCall: (fake) => {
    expect(fake.sendRequests).toHaveLength(1);
    expect(fake.effects).toBe(1);
  },
  expectOutput: (output, messageId) => expect(output).toEqual({ statusCode: 202, messageId }),
  ledgerEntry: getLedgerEntry,
  // Accepted at once, answered never (in time).
  loseNextAnswer: (fake) => fake.inject({ kind: 'delay', ms: 30_000 }),
});
