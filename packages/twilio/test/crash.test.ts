/**
 * Crash tests with real worker processes (crash-sms-worker.ts) SIGKILLed at precise points of a
 * guarded create, and an in-process rescuer worker that picks the step up after the lease expires.
 */
import { Client } from '@cyclone/core';
import { getLedgerEntry } from '@cyclone/idempotency';
import { killAllChildren, spawnWorker, waitFor } from '@cyclone/testkit';
import { startWorker, stepOf } from '@cyclone/testkit-engine';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { FakeTwilio } from '../src/testing/index.js';
import { CrashSmsFlow, configureCrashSms } from './support/crash-sms.js';
import { createTestDb, type TestDb } from './support/db.js';

let db: TestDb;
let client: Client;
let fake: FakeTwilio;

beforeAll(async () => {
  db = await createTestDb();
  client = new Client({ connectionString: db.url, poolSize: 6 });
});
afterAll(async () => {
  await killAllChildren();
  await fake?.close();
  await client?.close();
  await db?.drop();
});
beforeEach(async () => {
  fake = await FakeTwilio.start();
  configureCrashSms({ twilio: fake.client(), emit: () => {}, victim: false });
});
afterEach(async () => {
  await killAllChildren();
  await fake.close();
});

const victim = () =>
  spawnWorker({
    script: new URL('./support/crash-sms-worker.ts', import.meta.url),
    env: {
      DATABASE_URL: db.url,
      TWILIO_FAKE_ORIGIN: fake.origin,
      TWILIO_FAKE_SID: fake.accountSid,
      TWILIO_FAKE_TOKEN: fake.authToken,
      CRASH_LEASE_MS: '1000',
    },
  });

describe('SIGKILL of a worker', () => {
  it('after the create, before the step completed: the retry sends nothing and completes with the stored SID', async () => {
    const child = await victim();
    const { runId } = await client.submit(CrashSmsFlow, { to: '+15551234567', onUnknown: 'fail' });
    const m = await child.waitForLine(new RegExp(`^SENT ${runId} 1 (SM[0-9a-f]{32})$`));
    const sid = m[1];
    expect(sid).toBe(fake.created[0]?.sid);
    expect((await stepOf(client, runId)).state).toBe('running');
    expect((await child.kill('SIGKILL')).signal).toBe('SIGKILL');

    const rescuer = await startWorker(client, [CrashSmsFlow]);
    try {
      const run = await client.waitForRun(runId, { timeoutMs: 15_000, pollMs: 25 });
      expect(run.state).toBe('completed');
      expect(run.steps[0]?.attempt).toBe(2);
      expect(run.steps[0]?.output).toMatchObject({ sid, status: 'queued' });
    } finally {
      await rescuer.stop();
    }
    expect(fake.createRequests).toHaveLength(1);
    expect(await getLedgerEntry(client, `${runId}:send`)).toMatchObject({
      phase: 'succeeded',
      providerRef: sid,
      calls: 1,
      ownerAttempt: 1,
    });
  });

  it("during the create (Twilio created it, no response yet): the rescuer's default reconcile finds it by list, no second message", async () => {
    fake.inject({ kind: 'delay', ms: 30_000 }); // created at once, answered never (in time)
    const child = await victim();
    const { runId } = await client.submit(CrashSmsFlow, {
      to: '+15551234567',
      onUnknown: 'reconcile',
    });
    await child.waitForLine(new RegExp(`^SENDING ${runId} 1$`));
    await waitFor('Twilio creating the message', () => fake.effects === 1);
    await child.kill('SIGKILL');

    const rescuer = await startWorker(client, [CrashSmsFlow]);
    try {
      const run = await client.waitForRun(runId, { timeoutMs: 15_000, pollMs: 25 });
      expect(run.state).toBe('completed');
      expect(run.steps[0]?.output).toMatchObject({ sid: fake.created[0]?.sid, status: 'sent' });
    } finally {
      await rescuer.stop();
    }
    expect(fake.createRequests).toHaveLength(1);
    expect(fake.effects).toBe(1);
  });

  it("during the create with policy 'fail': the retry does not send again and stops for an operator", async () => {
    fake.inject({ kind: 'delay', ms: 30_000 });
    const child = await victim();
    const { runId } = await client.submit(CrashSmsFlow, { to: '+15551234567', onUnknown: 'fail' });
    await child.waitForLine(new RegExp(`^SENDING ${runId} 1$`));
    await waitFor('Twilio creating the message', () => fake.effects === 1);
    await child.kill('SIGKILL');

    const rescuer = await startWorker(client, [CrashSmsFlow]);
    try {
      const run = await client.waitForRun(runId, { timeoutMs: 15_000, pollMs: 25 });
      expect(run.state).toBe('failed');
      expect(run.steps[0]?.errors.at(-1)?.message).toMatch(/unknown outcome/);
    } finally {
      await rescuer.stop();
    }
    expect(fake.createRequests).toHaveLength(1);
  });
});
