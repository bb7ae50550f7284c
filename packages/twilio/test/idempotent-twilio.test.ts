/**
 * `idempotentTwilio` end to end: the real `twilio` client against the fake (through a
 * `RequestClient` subclass), real PostgreSQL, real core Workers, signed status callbacks into the
 * real handler. The must-have tests of PROVIDERS.md § 5.3 plus the ledger's guarantees across
 * attempts and operator retries. Each test names the fault it injects.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Client } from '@cyclone/core';
import { getLedgerEntry, resolveKey } from '@cyclone/idempotency';
import { deferred, waitFor } from '@cyclone/testkit';
import {
  expectNoAttemptUsed,
  oneStep,
  runOnce,
  startWorker,
  stepOf,
  waitForSnoozes,
} from '@cyclone/testkit-engine';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  callbacksForKey,
  idempotentTwilio,
  type SentSms,
  statusCallbackListener,
} from '../src/index.js';
import { FakeTwilio, type FakeTwilioOptions } from '../src/testing/index.js';
import { createTestDb, type TestDb } from './support/db.js';

const PUBLIC = 'https://app.example.com';
const HOOK = `${PUBLIC}/hooks/twilio/status`;
const TO = '+15551234567';
const FROM = '+15005550006';

let db: TestDb;
let client: Client;
let fake: FakeTwilio;
let app: Server;
let appOrigin: string;
let authToken = '';

beforeAll(async () => {
  db = await createTestDb();
  client = new Client({ connectionString: db.url, poolSize: 6 });
  app = createServer((req, res) => {
    void statusCallbackListener({ pool: client.pool, authToken, publicUrl: PUBLIC })(req, res);
  });
  await new Promise<void>((r) => app.listen(0, '127.0.0.1', () => r()));
  appOrigin = `http://127.0.0.1:${(app.address() as AddressInfo).port}`;
});
afterAll(async () => {
  await fake?.close();
  await new Promise((r) => app?.close(r));
  await client?.close();
  await db?.drop();
});

async function startFake(options: FakeTwilioOptions = {}): Promise<void> {
  await fake?.close();
  fake = await FakeTwilio.start({
    // Twilio calls the public URL; in the test it lands on the loopback app.
    callbackTarget: (u) => u.replace(PUBLIC, appOrigin),
    ...options,
  });
  authToken = fake.authToken;
}
beforeEach(async () => {
  await startFake();
});

const sms = { to: TO, from: FROM, body: 'Your code is 123456' };

/** The `ck` of every create request's StatusCallback, in order. */
const wireKeys = () =>
  fake.createRequests.map((r) => {
    const cb = r.form.get('StatusCallback');
    return cb ? new URL(cb).searchParams.get('ck') : null;
  });

let n = 0;
const name = (s: string) => `tw_${s}_${++n}`;

describe('idempotentTwilio', () => {
  it('creates once, stores the SID, tags the status callback with the key, records callbacks (no fault)', async () => {
    const wf = oneStep(name('ok'), async (ctx) =>
      idempotentTwilio(fake.client(), ctx, { statusCallback: HOOK }).messages.create(sms),
    );
    const run = await runOnce(client, wf, {});
    expect(run.state).toBe('completed');
    const key = `${run.runId}:send`;
    const msg = fake.created[0];
    expect(fake.effects).toBe(1);
    expect(msg?.statusCallback).toBe(`${HOOK}?ck=${encodeURIComponent(key)}`);
    const out = run.steps[0]?.output as unknown as SentSms;
    expect(out).toMatchObject({
      sid: msg?.sid,
      status: 'queued',
      to: TO,
      from: FROM,
      body: sms.body,
      accountSid: fake.accountSid,
    });
    expect(out.dateCreated).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.000Z$/);
    expect(await getLedgerEntry(client, key)).toMatchObject({
      phase: 'succeeded',
      providerRef: msg?.sid,
      provider: 'twilio',
      calls: 1,
    });
    await fake.idle();
    const cbs = await callbacksForKey({ pool: client.pool }, key);
    expect(cbs.map((c) => [c.messageSid, c.messageStatus])).toEqual([[msg?.sid, 'sent']]);
  });

  it("lost response, policy 'fail': discarded for an operator, exactly one message (§ 5.3 #1; fault: effect then reset)", async () => {
    fake.inject({ kind: 'reset', commit: true });
    const wf = oneStep(name('fail'), async (ctx) =>
      idempotentTwilio(fake.client(), ctx, { onUnknown: 'fail', quietPeriodMs: 0 }).messages.create(
        sms,
      ),
    );
    const run = await runOnce(client, wf, {});
    expect(run.state).toBe('failed');
    const step = await stepOf(client, run.runId);
    expect(step.errors.map((e) => e.kind)).toEqual(['error', 'non_retryable']);
    expect(step.errors[0]?.message).toMatch(/ECONNRESET/);
    expect(step.errors[1]?.message).toMatch(/unknown outcome/);
    expect(fake.createRequests).toHaveLength(1);
    expect(fake.effects).toBe(1);
    expect(await getLedgerEntry(client, `${run.runId}:send`)).toMatchObject({ phase: 'unknown' });
  });

  it("lost response, default 'reconcile': the list finds the one message → succeeded, no resend (§ 5.3 #1, #2; fault: effect then reset)", async () => {
    fake.inject({ kind: 'reset', commit: true });
    // An older identical message (before the call) and one to someone else do not match.
    fake.seedMessage({ ...sms, dateCreated: new Date(Date.now() - 10 * 60_000) });
    fake.seedMessage({ ...sms, to: '+15557654321' });
    const wf = oneStep(name('list'), async (ctx) =>
      idempotentTwilio(fake.client(), ctx, { quietPeriodMs: 0 }).messages.create(sms),
    );
    const run = await runOnce(client, wf, {});
    expect(run.state).toBe('completed');
    const msg = fake.created[0];
    expect(run.steps[0]?.output).toMatchObject({ sid: msg?.sid, status: 'sent', body: sms.body });
    expect(fake.createRequests).toHaveLength(1);
    const list = fake.requests.find((r) => r.route === 'list');
    expect(list?.query.get('To')).toBe(TO);
    expect(list?.query.get('From')).toBe(FROM);
    expect(list?.query.get('DateSent>')).toMatch(/^\d{4}-\d\d-\d\dT00:00:00Z$/);
    expect(await getLedgerEntry(client, `${run.runId}:send`)).toMatchObject({
      phase: 'succeeded',
      providerRef: msg?.sid,
      calls: 1,
    });
  });

  it('reconcile with two matching messages stops for an operator (§ 5.3 #2; fault: effect then reset + a twin message)', async () => {
    fake.inject({ kind: 'reset', commit: true });
    const twin = fake.seedMessage({ ...sms }); // same To, From, body, created just now
    const wf = oneStep(name('twins'), async (ctx) =>
      idempotentTwilio(fake.client(), ctx, { quietPeriodMs: 0 }).messages.create(sms),
    );
    const run = await runOnce(client, wf, {});
    expect(run.state).toBe('failed');
    const last = (await stepOf(client, run.runId)).errors.at(-1);
    expect(last?.kind).toBe('non_retryable');
    expect(last?.message).toMatch(/2 listed messages to \+15551234567 match/);
    expect(last?.message).toContain(twin.sid);
    expect(last?.message).toContain(fake.created[0]?.sid);
    expect(fake.createRequests).toHaveLength(1);
  });

  it('reconcile through the status-callback table, even with a twin in the list (§ 5.3 #3; fault: effect then reset)', async () => {
    fake.inject({ kind: 'reset', commit: true });
    fake.seedMessage({ ...sms }); // the list alone would be ambiguous
    const wf = oneStep(
      name('callback'),
      async (ctx) =>
        idempotentTwilio(fake.client(), ctx, {
          statusCallback: HOOK,
          quietPeriodMs: 0,
        }).messages.create(sms),
      { backoff: () => 1_000 },
    );
    const worker = await startWorker(client, [wf]);
    try {
      const { runId } = await client.submit(wf, {});
      const key = `${runId}:send`;
      // Twilio sent it and called back (signed) before the retry.
      await waitFor('the callback', async () => (await callbacksForKey(client, key)).length > 0);
      const run = await client.waitForRun(runId, { timeoutMs: 10_000, pollMs: 25 });
      expect(run.state).toBe('completed');
      const msg = fake.created[0];
      expect(run.steps[0]?.output).toMatchObject({ sid: msg?.sid });
      expect(fake.requests.filter((r) => r.route === 'list')).toHaveLength(0);
      expect(fake.requests.filter((r) => r.route === 'fetch')).toHaveLength(1);
      expect(fake.createRequests).toHaveLength(1);
      expect(fake.callbacks.every((c) => c.status === 204)).toBe(true);
    } finally {
      await worker.stop();
    }
  });

  it('a 21211 is recorded as definitive: discarded at once, one POST (§ 5.3 #4; fault: invalid To)', async () => {
    const wf = oneStep(name('21211'), async (ctx) =>
      idempotentTwilio(fake.client(), ctx).messages.create({ ...sms, to: '+15005550001' }),
    );
    const run = await runOnce(client, wf, {});
    expect(run.state).toBe('failed');
    const step = await stepOf(client, run.runId);
    expect(step.attempt).toBe(1);
    expect(step.errors[0]?.kind).toBe('non_retryable');
    expect(step.errors[0]?.message).toMatch(/failed definitively/);
    const entry = await getLedgerEntry(client, `${run.runId}:send`);
    expect(entry?.phase).toBe('failed');
    expect(entry?.error).toMatchObject({ status: 400, code: '21211', outcome: 'definitive' });
    expect(fake.createRequests).toHaveLength(1);
  });

  it('params the SDK rejects before sending are definitive, with no request (fault: no To)', async () => {
    const wf = oneStep(name('sdk_reject'), async (ctx) =>
      idempotentTwilio(fake.client(), ctx).messages.create({ from: FROM, body: 'x' } as typeof sms),
    );
    const run = await runOnce(client, wf, {});
    expect(run.state).toBe('failed');
    const entry = await getLedgerEntry(client, `${run.runId}:send`);
    expect(entry?.phase).toBe('failed');
    expect(entry?.error?.reason).toMatch(/rejected by the SDK before sending/);
    expect(fake.requests).toHaveLength(0);
  });

  it('autoRetry is off by default: a 429 is one POST, then the step snoozes and sends again, no attempt used (§ 5.3 #5; fault: 429 without Retry-After)', async () => {
    fake.inject({ kind: 'status', status: 429 });
    const wf = oneStep(name('429'), async (ctx) =>
      idempotentTwilio(fake.client(), ctx, { quietPeriodMs: 0 }).messages.create(sms),
    );
    const run = await runOnce(client, wf, {});
    expect(run.state).toBe('completed');
    const step = await stepOf(client, run.runId);
    // No time named: the rate-limit backoff, 1 s (+ up to 25 %) for the first call.
    expectNoAttemptUsed(step, { maxAttempts: 5, used: 1 });
    const [first, second] = fake.createRequests;
    expect(fake.createRequests).toHaveLength(2);
    expect((second?.at.getTime() ?? 0) - (first?.at.getTime() ?? 0)).toBeGreaterThanOrEqual(1_000);
    expect(fake.effects).toBe(1);
    expect(await getLedgerEntry(client, `${run.runId}:send`)).toMatchObject({
      phase: 'succeeded',
      calls: 2,
      error: { outcome: 'not_sent', status: 429, code: '20429' },
    });
  });

  it('429 with Retry-After: 2 → recorded as not sent, the next create reaches Twilio ≥ 2 s later with the same key, no attempt used (fault: 429 + Retry-After)', async () => {
    fake.inject({ kind: 'status', status: 429, headers: { 'retry-after': '2' } });
    const wf = oneStep(name('retry_after'), async (ctx) =>
      idempotentTwilio(fake.client(), ctx, { statusCallback: HOOK }).messages.create(sms),
    );
    const run = await runOnce(client, wf, {});
    expect(run.state).toBe('completed');
    const step = await stepOf(client, run.runId);
    expectNoAttemptUsed(step, { maxAttempts: 5, used: 1 });
    const key = `${run.runId}:send`;
    const [first, second] = fake.createRequests;
    expect(fake.createRequests).toHaveLength(2);
    expect((second?.at.getTime() ?? 0) - (first?.at.getTime() ?? 0)).toBeGreaterThanOrEqual(2_000);
    expect(wireKeys()).toEqual([key, key]);
    expect(fake.effects).toBe(1);
    expect(run.steps[0]?.output).toMatchObject({ sid: fake.created[0]?.sid });
  });

  it('a 5xx after the message was created is ambiguous and reconciled, never re-sent (fault: effect then 500)', async () => {
    fake.inject({ kind: 'status', status: 500, commit: true });
    const wf = oneStep(name('500'), async (ctx) =>
      idempotentTwilio(fake.client(), ctx, { quietPeriodMs: 0 }).messages.create(sms),
    );
    const run = await runOnce(client, wf, {});
    expect(run.state).toBe('completed');
    expect(run.steps[0]?.errors[0]?.message).toMatch(/HTTP 500 \(Twilio 20500\)/);
    expect(run.steps[0]?.output).toMatchObject({ sid: fake.created[0]?.sid });
    expect(fake.createRequests).toHaveLength(1);
  });

  it('reconcile finding nothing stops for an operator (the message may still be queued) (fault: effect then reset, not yet sent)', async () => {
    await startFake({ autoAdvance: 'none' }); // queued: no DateSent, invisible to the filter
    fake.inject({ kind: 'reset', commit: true });
    const wf = oneStep(name('none'), async (ctx) =>
      idempotentTwilio(fake.client(), ctx, { quietPeriodMs: 0 }).messages.create(sms),
    );
    const run = await runOnce(client, wf, {});
    expect(run.state).toBe('failed');
    expect((await stepOf(client, run.runId)).errors.at(-1)?.message).toMatch(
      /no status callback and no listed message/,
    );
    expect(fake.createRequests).toHaveLength(1);
  });

  it('the key is the same on every attempt and after an operator retry (faults: 429, then 503)', async () => {
    fake.inject({ kind: 'status', status: 429 });
    fake.inject({ kind: 'status', status: 503 });
    const wf = oneStep(name('stable'), async (ctx) =>
      idempotentTwilio(fake.client(), ctx, {
        onUnknown: 'fail',
        statusCallback: HOOK,
        quietPeriodMs: 0,
      }).messages.create(sms),
    );
    const run = await runOnce(client, wf, {});
    expect(run.state).toBe('failed');
    const key = `${run.runId}:send`;
    await resolveKey(client, key, { outcome: 'not_sent' }); // the operator saw no message
    const worker = await startWorker(client, [wf]);
    try {
      await client.retry(run.runId, 'send');
      const done = await client.waitForRun(run.runId, { timeoutMs: 10_000, pollMs: 25 });
      expect(done.state).toBe('completed');
      expect(done.steps[0]?.attempt).toBe(4);
    } finally {
      await worker.stop();
    }
    expect(wireKeys()).toEqual([key, key, key]);
    expect(fake.effects).toBe(1);
  });

  it("opt-in 'recall' sends again: two messages, at least once (fault: effect then reset)", async () => {
    fake.inject({ kind: 'reset', commit: true });
    const wf = oneStep(name('recall'), async (ctx) =>
      idempotentTwilio(fake.client(), ctx, {
        onUnknown: 'recall',
        quietPeriodMs: 0,
      }).messages.create(sms),
    );
    const run = await runOnce(client, wf, {});
    expect(run.state).toBe('completed');
    expect(fake.effects).toBe(2);
  });

  it('the default quiet period comes from the client timeout: the step snoozes until it ends', async () => {
    fake.inject({ kind: 'reset', commit: true });
    const wf = oneStep(
      name('quiet'),
      async (ctx) => idempotentTwilio(fake.client({ timeoutMs: 1_000 }), ctx).messages.create(sms),
      { maxAttempts: 2 },
    );
    const worker = await startWorker(client, [wf]);
    try {
      const { runId } = await client.submit(wf, {});
      const step = await waitForSnoozes(client, runId, 1);
      expect(step.state).toBe('scheduled');
      const started = (await getLedgerEntry(client, `${runId}:send`))?.callStartedAt?.getTime();
      // 1,000 ms timeout + 5,000 ms margin after the call started, plus the snooze's 100 ms.
      const until = step.scheduledAt.getTime() - (started ?? Number.NaN);
      expect(until).toBeGreaterThanOrEqual(6_000);
      expect(until).toBeLessThanOrEqual(6_500);
      expect(step.errors).toHaveLength(1); // the lost response only
      expect(fake.createRequests).toHaveLength(1);
    } finally {
      await worker.stop();
    }
  });
});

describe('idempotentTwilio: the status callback URL is not part of the request', () => {
  it("a retry after a deploy changed the public callback URL is the same request: the old URL's callback settles it, one message (fault: effect then reset)", async () => {
    // Blue/green: the old deployment still answers its URL (same database) while the new one
    // runs the retry. Twilio keeps calling the URL it was given at create.
    const OLD_PUBLIC = 'https://old.app.example.com';
    const old = createServer((req, res) => {
      void statusCallbackListener({ pool: client.pool, authToken, publicUrl: OLD_PUBLIC })(
        req,
        res,
      );
    });
    await new Promise<void>((r) => old.listen(0, '127.0.0.1', () => r()));
    const oldOrigin = `http://127.0.0.1:${(old.address() as AddressInfo).port}`;
    const callbackIn = deferred();
    try {
      await startFake({
        callbackTarget: (u) => u.replace(OLD_PUBLIC, oldOrigin).replace(PUBLIC, appOrigin),
      });
      fake.inject({ kind: 'reset', commit: true });
      fake.seedMessage({ ...sms }); // a twin: the list alone would be ambiguous
      const wf = oneStep(name('deploy'), async (ctx) => {
        // Attempt 1 ran before the deploy; the retry runs after it, once the callback is in.
        if (ctx.attempt > 1) await callbackIn.promise;
        return idempotentTwilio(fake.client(), ctx, {
          statusCallback: `${ctx.attempt === 1 ? OLD_PUBLIC : PUBLIC}/hooks/twilio/status`,
          quietPeriodMs: 0,
        }).messages.create(sms);
      });
      const worker = await startWorker(client, [wf]);
      try {
        const { runId } = await client.submit(wf, {});
        const key = `${runId}:send`;
        await waitFor('the callback to the old URL', async () => {
          return (await callbacksForKey(client, key)).length > 0;
        });
        callbackIn.resolve();
        const run = await client.waitForRun(runId, { timeoutMs: 10_000, pollMs: 25 });
        // Only the lost response: no IdempotencyMismatchError on the retry.
        expect(run.steps[0]?.errors.map((e) => e.message)).toEqual([
          expect.stringMatching(/ECONNRESET/),
        ]);
        expect(run.state).toBe('completed');
        const msg = fake.created[0];
        expect(run.steps[0]?.output).toMatchObject({ sid: msg?.sid });
        expect(fake.createRequests).toHaveLength(1);
        expect(msg?.statusCallback).toBe(
          `${OLD_PUBLIC}/hooks/twilio/status?ck=${encodeURIComponent(key)}`,
        );
        expect(fake.requests.filter((r) => r.route === 'fetch')).toHaveLength(1);
        expect(fake.requests.filter((r) => r.route === 'list')).toHaveLength(0);
        expect(fake.callbacks.map((c) => c.status)).toEqual([204]);
        expect(await getLedgerEntry(client, key)).toMatchObject({
          phase: 'succeeded',
          providerRef: msg?.sid,
          calls: 1,
        });
      } finally {
        callbackIn.resolve();
        await worker.stop();
      }
    } finally {
      await fake.idle();
      await new Promise((r) => old.close(r));
    }
  });

  it('a statusCallback in the params that changed between attempts is the same request too (fault: effect then reset)', async () => {
    fake.inject({ kind: 'reset', commit: true });
    const wf = oneStep(name('params_cb'), async (ctx) =>
      idempotentTwilio(fake.client(), ctx, { quietPeriodMs: 0 }).messages.create({
        ...sms,
        statusCallback: `${HOOK}?release=${ctx.attempt === 1 ? 'r1' : 'r2'}`,
      }),
    );
    const run = await runOnce(client, wf, {});
    expect(run.steps[0]?.errors.map((e) => e.message)).toEqual([
      expect.stringMatching(/ECONNRESET/),
    ]);
    expect(run.state).toBe('completed');
    const msg = fake.created[0];
    expect(run.steps[0]?.output).toMatchObject({ sid: msg?.sid });
    expect(fake.createRequests).toHaveLength(1);
    expect(new URL(msg?.statusCallback ?? '').searchParams.get('release')).toBe('r1');
    expect(await getLedgerEntry(client, `${run.runId}:send`)).toMatchObject({
      phase: 'succeeded',
      providerRef: msg?.sid,
      calls: 1,
    });
  });
});

describe('idempotentTwilio: the quiet period is a snooze, so the policy runs', () => {
  it("a lost response with backoff 300 ms and 6 attempts: the step snoozes out the quiet period, then the default 'reconcile' completes it with the SID that was sent (fault: effect then reset)", async () => {
    fake.inject({ kind: 'reset', commit: true });
    const quietPeriodMs = 3_000;
    const wf = oneStep(
      name('quiet_reconcile'),
      async (ctx) => idempotentTwilio(fake.client(), ctx, { quietPeriodMs }).messages.create(sms),
      { backoff: () => 300, maxAttempts: 6 },
    );
    const run = await runOnce(client, wf, {}, 20_000);
    expect(run.state).toBe('completed');
    const msg = fake.created[0];
    expect(run.steps[0]?.output).toMatchObject({ sid: msg?.sid, to: TO, body: sms.body });
    const step = await stepOf(client, run.runId);
    // The lost response used attempt 1; waiting out the quiet period used none.
    expectNoAttemptUsed(step, { maxAttempts: 6, used: 2, errors: [/ECONNRESET/] });
    expect(fake.createRequests).toHaveLength(1);
    expect(fake.effects).toBe(1);
    const entry = await getLedgerEntry(client, `${run.runId}:send`);
    expect(entry).toMatchObject({ phase: 'succeeded', providerRef: msg?.sid, calls: 1 });
    // The reconcile ran once the quiet period was over.
    const list = fake.requests.find((r) => r.route === 'list');
    expect(
      (list?.at.getTime() ?? 0) - (entry?.callStartedAt?.getTime() ?? 0),
    ).toBeGreaterThanOrEqual(quietPeriodMs - 50);
  });
});

describe('idempotentTwilio: reconcile with assumeNotSentAfterMs', () => {
  it('nothing found before it has passed is "in progress": the step snoozes and looks again, and the message found later settles it, no resend (fault: effect then reset, not yet sent)', async () => {
    await startFake({ autoAdvance: 'none' }); // queued: no DateSent, invisible to the list
    fake.inject({ kind: 'reset', commit: true });
    const wf = oneStep(
      name('keep_looking'),
      async (ctx) =>
        idempotentTwilio(fake.client(), ctx, {
          quietPeriodMs: 0,
          assumeNotSentAfterMs: 60_000,
        }).messages.create(sms),
      { maxAttempts: 3, backoff: () => 100 },
    );
    const worker = await startWorker(client, [wf]);
    try {
      const { runId } = await client.submit(wf, {});
      const step = await waitForSnoozes(client, runId, 2);
      // Each look that found nothing snoozed (≥ 1 s: half the wait so far, at least 1 s).
      expect(step.state).toBe('scheduled');
      expectNoAttemptUsed(step, { maxAttempts: 3, used: 1, minSnoozes: 2, errors: [/ECONNRESET/] });
      expect(fake.requests.filter((r) => r.route === 'list').length).toBeGreaterThanOrEqual(2);

      // Twilio sends it: the next look finds it in the list.
      const msg = fake.created[0] as (typeof fake.created)[number];
      await fake.advance(msg.sid, 'sent');
      const run = await client.waitForRun(runId, { timeoutMs: 10_000, pollMs: 25 });
      expect(run.state).toBe('completed');
      expect(run.steps[0]?.output).toMatchObject({ sid: msg.sid, status: 'sent' });
      expect(fake.createRequests).toHaveLength(1);
      expect(fake.effects).toBe(1);
      expect(await getLedgerEntry(client, `${runId}:send`)).toMatchObject({
        phase: 'succeeded',
        providerRef: msg.sid,
        calls: 1,
      });
    } finally {
      await worker.stop();
    }
  });

  it('once it has passed with nothing found, the SMS is sent again under the same key; not before (fault: reset before the effect)', async () => {
    fake.inject({ kind: 'reset', commit: false });
    const assumeNotSentAfterMs = 1_500;
    const wf = oneStep(
      name('assume'),
      async (ctx) =>
        idempotentTwilio(fake.client(), ctx, {
          statusCallback: HOOK,
          quietPeriodMs: 0,
          assumeNotSentAfterMs,
        }).messages.create(sms),
      { maxAttempts: 3, backoff: () => 100 },
    );
    const run = await runOnce(client, wf, {});
    expect(run.state).toBe('completed');
    const step = await stepOf(client, run.runId);
    // Attempt 1 lost the call, attempt 2 looked (nothing: a snooze), the look after the
    // deadline sent again; the looks used no attempt.
    expectNoAttemptUsed(step, { maxAttempts: 3, used: 2, errors: [/ECONNRESET/] });
    const key = `${run.runId}:send`;
    const [call1, call2] = fake.createRequests;
    expect(fake.createRequests).toHaveLength(2);
    expect(fake.effects).toBe(1);
    expect(wireKeys()).toEqual([key, key]);
    // The second create came once assumeNotSentAfterMs had passed since the first call started
    // (stamped just before the first request; 50 ms for clock reading granularity).
    expect((call2?.at.getTime() ?? 0) - (call1?.at.getTime() ?? 0)).toBeGreaterThanOrEqual(
      assumeNotSentAfterMs - 50,
    );
    expect(run.steps[0]?.output).toMatchObject({ sid: fake.created[0]?.sid });
    expect(await getLedgerEntry(client, key)).toMatchObject({
      phase: 'succeeded',
      providerRef: fake.created[0]?.sid,
      calls: 2,
    });
  });
});
