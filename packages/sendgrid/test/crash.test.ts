/**
 * Crash tests with real worker processes (crash-mail-worker.ts) SIGKILLed at precise points of a
 * guarded send, and an in-process rescuer worker that picks the step up after the lease expires.
 */
import { Client } from '@cyclone/core';
import { getLedgerEntry } from '@cyclone/idempotency';
import { killAllChildren, spawnWorker, waitFor } from '@cyclone/testkit';
import { startWorker, stepOf } from '@cyclone/testkit-engine';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { FakeSendGrid } from '../src/testing/index.js';
import { CrashMailFlow, configureCrashMail } from './support/crash-mail.js';
import { createTestDb, type TestDb } from './support/db.js';

let db: TestDb;
let client: Client;
let fake: FakeSendGrid;

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
  fake = await FakeSendGrid.start();
  configureCrashMail({ mail: fake.mailService(), emit: () => {}, victim: false });
});
afterEach(async () => {
  await killAllChildren();
  await fake.close();
});

const victim = () =>
  spawnWorker({
    script: new URL('./support/crash-mail-worker.ts', import.meta.url),
    env: {
      DATABASE_URL: db.url,
      SENDGRID_BASE_URL: fake.baseUrl,
      CRASH_LEASE_MS: '1000',
    },
  });

describe('SIGKILL of a worker', () => {
  it('after the send, before the step completed: the retry sends nothing and completes with the stored X-Message-Id', async () => {
    const child = await victim();
    const { runId } = await client.submit(CrashMailFlow, {
      to: 'ada@example.com',
      onUnknown: 'fail',
    });
    const m = await child.waitForLine(new RegExp(`^SENT ${runId} 1 (\\S+)$`));
    const messageId = m[1];
    expect(messageId).toBe(fake.sent[0]?.messageId);
    const key = `${runId}:send`;
    expect(await getLedgerEntry(client, key)).toMatchObject({ phase: 'succeeded' });
    expect((await stepOf(client, runId)).state).toBe('running');
    const exit = await child.kill('SIGKILL');
    expect(exit.signal).toBe('SIGKILL');

    const rescuer = await startWorker(client, [CrashMailFlow]);
    try {
      const run = await client.waitForRun(runId, { timeoutMs: 15_000, pollMs: 25 });
      expect(run.state).toBe('completed');
      expect(run.steps[0]?.attempt).toBe(2);
      expect(run.steps[0]?.output).toEqual({ statusCode: 202, messageId });
    } finally {
      await rescuer.stop();
    }
    expect(fake.sendRequests).toHaveLength(1);
    expect(fake.effects).toBe(1);
    expect(await getLedgerEntry(client, key)).toMatchObject({
      phase: 'succeeded',
      providerRef: messageId,
      calls: 1,
      ownerAttempt: 1,
    });
  });

  it('during the send (SendGrid accepted, no response yet): the retry does not send again and stops for an operator', async () => {
    fake.inject({ kind: 'delay', ms: 30_000 }); // accepted at once, answered never (in time)
    const child = await victim();
    const { runId } = await client.submit(CrashMailFlow, {
      to: 'ada@example.com',
      onUnknown: 'fail',
    });
    await child.waitForLine(new RegExp(`^SENDING ${runId} 1$`));
    await waitFor('SendGrid accepting the e-mail', () => fake.effects === 1);
    await child.kill('SIGKILL');

    const rescuer = await startWorker(client, [CrashMailFlow]);
    try {
      const run = await client.waitForRun(runId, { timeoutMs: 15_000, pollMs: 25 });
      expect(run.state).toBe('failed');
      const step = run.steps[0];
      expect(step?.state).toBe('discarded');
      expect(step?.errors.at(-1)?.kind).toBe('non_retryable');
      expect(step?.errors.at(-1)?.message).toMatch(
        /unknown outcome for idempotency key .*:send: the call made by attempt 1/,
      );
    } finally {
      await rescuer.stop();
    }
    expect(fake.sendRequests).toHaveLength(1);
    expect(await getLedgerEntry(client, `${runId}:send`)).toMatchObject({
      phase: 'unknown',
      calls: 1,
    });
  });
});
