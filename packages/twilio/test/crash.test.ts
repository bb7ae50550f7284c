/**
 * Crash tests with real worker processes (crash-sms-worker.ts) SIGKILLed at precise points of a
 * guarded create, and an in-process rescuer worker that picks the step up after the lease expires
 * (the scenarios of @cyclone/testkit-engine's `crashSuite`, plus the default policy's reconcile).
 */
import { getLedgerEntry } from '@cyclone/idempotency';
import { waitFor } from '@cyclone/testkit';
import { crashSuite } from '@cyclone/testkit-engine';
import { expect, it } from 'vitest';
import { FakeTwilio } from '../src/testing/index.js';
import { CrashSmsFlow, configureCrashSms } from './support/crash-sms.js';
import { createTestDb } from './support/db.js';

const crash = crashSuite({
  provider: 'Twilio',
  call: 'create',
  workflow: CrashSmsFlow,
  refPattern: 'SM[0-9a-f]{32}',
  script: new URL('./support/crash-sms-worker.ts', import.meta.url),
  input: { to: '+15551234567', onUnknown: 'fail' },
  createTestDb,
  startFake: async () => {
    const fake = await FakeTwilio.start();
    configureCrashSms({ twilio: fake.client(), emit: () => {}, victim: false });
    return fake;
  },
  childEnv: (fake) => ({
    TWILIO_FAKE_ORIGIN: fake.origin,
    TWILIO_FAKE_SID: fake.accountSid,
    TWILIO_FAKE_TOKEN: fake.authToken,
  }),
  firstRef: (fake) => fake.created[0]?.sid,
  performed: (fake) => fake.effects === 1,
  expectOneCall: (fake) => {
    expect(fake.createRequests).toHaveLength(1);
    expect(fake.effects).toBe(1);
  },
  expectOutput: (output, sid) => expect(output).toMatchObject({ sid, status: 'queued' }),
  ledgerEntry: getLedgerEntry,
  // Created at once, answered never (in time).
  loseNextAnswer: (fake) => fake.inject({ kind: 'delay', ms: 30_000 }),
});

it("SIGKILL during the create (Twilio created it, no response yet): the rescuer's default reconcile finds it by list, no second message", async () => {
  const { fake, client } = crash;
  fake.inject({ kind: 'delay', ms: 30_000 }); // created at once, answered never (in time)
  const child = await crash.victim();
  const { runId } = await client.submit(CrashSmsFlow, {
    to: '+15551234567',
    onUnknown: 'reconcile',
  });
  await child.waitForLine(new RegExp(`^SENDING ${runId} 1$`));
  await waitFor('Twilio creating the message', () => fake.effects === 1);
  await child.kill('SIGKILL');

  const run = await crash.rescue(runId);
  expect(run.state).toBe('completed');
  expect(run.steps[0]?.output).toMatchObject({ sid: fake.created[0]?.sid, status: 'sent' });
  expect(fake.createRequests).toHaveLength(1);
  expect(fake.effects).toBe(1);
});
