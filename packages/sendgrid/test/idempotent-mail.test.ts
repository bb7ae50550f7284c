/**
 * `idempotentMail` end to end: the real `@sendgrid/mail` against the fake, real PostgreSQL, real
 * core Workers. The must-have tests of PROVIDERS.md § 5.2 plus the ledger's guarantees across
 * attempts and operator retries. Each test names the fault it injects.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Client } from '@cyclone/core';
import { getLedgerEntry, resolveKey } from '@cyclone/idempotency';
import { waitFor } from '@cyclone/testkit';
import {
  expectNoAttemptUsed,
  oneStep,
  runOnce,
  startWorker,
  stepOf,
  waitForSnoozes,
} from '@cyclone/testkit-engine';
import type { MailDataRequired } from '@sendgrid/mail';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { eventWebhookListener, idempotentMail, type SentMail } from '../src/index.js';
import { FakeSendGrid } from '../src/testing/index.js';
import { createTestDb, type TestDb } from './support/db.js';

let db: TestDb;
let client: Client;
let fake: FakeSendGrid;
let hooks: Server;
let hookUrl: string;

beforeAll(async () => {
  db = await createTestDb();
  client = new Client({ connectionString: db.url, poolSize: 6 });
  hooks = createServer(eventWebhookListener({ pool: client.pool }));
  await new Promise<void>((r) => hooks.listen(0, '127.0.0.1', () => r()));
  hookUrl = `http://127.0.0.1:${(hooks.address() as AddressInfo).port}/hooks/sendgrid`;
});
afterAll(async () => {
  await new Promise((r) => hooks?.close(r));
  await client?.close();
  await db?.drop();
});
beforeEach(async () => {
  await fake?.close();
  fake = await FakeSendGrid.start();
});

const receipt = (over: Partial<MailDataRequired> = {}): MailDataRequired =>
  ({
    to: 'ada@example.com',
    from: 'shop@example.com',
    subject: 'Your receipt',
    text: 'Thanks for your order.',
    ...over,
  }) as MailDataRequired;

/** The `custom_args.cyclone_key` of every send request the fake received, in order. */
const wireKeys = () =>
  fake.sendRequests.map(
    (r) => (r.json as { custom_args?: Record<string, string> }).custom_args?.cyclone_key,
  );

let n = 0;
const name = (s: string) => `sg_${s}_${++n}`;

describe('idempotentMail', () => {
  it('tags every message with custom_args and stores the X-Message-Id (§ 5.2 #1, #6; no fault)', async () => {
    const msg = receipt({ customArgs: { order_id: 'o-42' } });
    const before = structuredClone(msg);
    const wf = oneStep(name('tags'), async (ctx) =>
      idempotentMail(fake.mailService(), ctx).send(msg),
    );
    const run = await runOnce(client, wf, {});
    expect(run.state).toBe('completed');
    expect(msg).toEqual(before); // the caller's object is not mutated
    const key = `${run.runId}:send`;
    const sent = fake.sent[0];
    expect(fake.effects).toBe(1);
    expect(sent?.customArgs).toEqual({
      order_id: 'o-42',
      cyclone_key: key,
      cyclone_run: run.runId,
      cyclone_node: 'send',
    });
    const out = run.steps[0]?.output as unknown as SentMail;
    expect(out).toEqual({ statusCode: 202, messageId: sent?.messageId });
    const entry = await getLedgerEntry(client, key);
    expect(entry).toMatchObject({
      phase: 'succeeded',
      providerRef: sent?.messageId,
      provider: 'sendgrid',
      operation: 'POST /v3/mail/send',
      calls: 1,
    });
  });

  it('sets the key in personalization-level custom_args too (they override the top level)', async () => {
    const wf = oneStep(name('perso'), async (ctx) =>
      idempotentMail(fake.mailService(), ctx, { scope: 'welcome' }).send({
        from: 'shop@example.com',
        subject: 's',
        text: 't',
        personalizations: [
          { to: 'ada@example.com', customArgs: { cyclone_key: 'forged', user: 'u1' } },
        ],
      }),
    );
    const run = await runOnce(client, wf, {});
    expect(run.state).toBe('completed');
    const body = fake.sent[0]?.body as {
      personalizations: { custom_args: Record<string, string> }[];
    };
    expect(body.personalizations[0]?.custom_args).toMatchObject({
      cyclone_key: `${run.runId}:send:welcome`,
      user: 'u1',
    });
  });

  it('lost response, default policy: ledger unknown, discarded for an operator, no second POST (§ 5.2 #2; fault: effect then reset)', async () => {
    fake.inject({ kind: 'reset', commit: true });
    const wf = oneStep(name('lost'), async (ctx) =>
      idempotentMail(fake.mailService(), ctx, { quietPeriodMs: 0 }).send(receipt()),
    );
    const run = await runOnce(client, wf, {});
    expect(run.state).toBe('failed');
    const step = await stepOf(client, run.runId);
    expect(step.state).toBe('discarded');
    expect(step.errors.map((e) => e.kind)).toEqual(['error', 'non_retryable']);
    expect(step.errors[0]?.message).toMatch(/may or may not have taken effect \(ECONNRESET\)/);
    expect(step.errors[1]?.message).toMatch(/unknown outcome .* policy 'fail'/);
    expect(fake.sendRequests).toHaveLength(1);
    expect(fake.effects).toBe(1);
    const key = `${run.runId}:send`;
    expect(await getLedgerEntry(client, key)).toMatchObject({ phase: 'unknown', calls: 1 });

    // The operator checks SendGrid, records what was sent and retries: no POST.
    const messageId = fake.sent[0]?.messageId as string;
    await resolveKey(client, key, {
      outcome: 'succeeded',
      result: { statusCode: 202, messageId },
      providerRef: messageId,
    });
    const worker = await startWorker(client, [wf]);
    try {
      await client.retry(run.runId, 'send');
      const done = await client.waitForRun(run.runId, { timeoutMs: 10_000, pollMs: 25 });
      expect(done.state).toBe('completed');
      expect(done.steps[0]?.output).toEqual({ statusCode: 202, messageId });
    } finally {
      await worker.stop();
    }
    expect(fake.sendRequests).toHaveLength(1);
  });

  it("opt-in 'recall' sends again: two e-mails, at least once (§ 5.2 #3; fault: effect then reset)", async () => {
    fake.inject({ kind: 'reset', commit: true });
    const wf = oneStep(name('recall'), async (ctx) =>
      idempotentMail(fake.mailService(), ctx, { onUnknown: 'recall', quietPeriodMs: 0 }).send(
        receipt(),
      ),
    );
    const run = await runOnce(client, wf, {});
    expect(run.state).toBe('completed');
    expect(fake.effects).toBe(2); // the documented price of at-least-once
    const key = `${run.runId}:send`;
    expect(wireKeys()).toEqual([key, key]);
    const entry = await getLedgerEntry(client, key);
    expect(entry).toMatchObject({
      phase: 'succeeded',
      calls: 2,
      providerRef: fake.sent[1]?.messageId,
    });
  });

  it("'reconcile' finds the Event Webhook event: succeeded, no resend (§ 5.2 #4; fault: effect then reset)", async () => {
    fake.inject({ kind: 'reset', commit: true });
    const wf = oneStep(
      name('reconcile'),
      async (ctx) =>
        idempotentMail(fake.mailService(), ctx, { onUnknown: 'reconcile', quietPeriodMs: 0 }).send(
          receipt(),
        ),
      { backoff: () => 1_000 },
    );
    const worker = await startWorker(client, [wf]);
    try {
      const { runId } = await client.submit(wf, {});
      await waitFor('the lost send', () => fake.effects === 1);
      // SendGrid processed it and posts its events before the retry (backoff 1 s).
      const d = await fake.deliverEvents(hookUrl);
      expect(d.status).toBe(200);
      const run = await client.waitForRun(runId, { timeoutMs: 10_000, pollMs: 25 });
      expect(run.state).toBe('completed');
      const messageId = fake.sent[0]?.messageId;
      expect(run.steps[0]?.output).toEqual({ statusCode: 202, messageId });
      expect(fake.sendRequests).toHaveLength(1);
      expect(await getLedgerEntry(client, `${runId}:send`)).toMatchObject({
        phase: 'succeeded',
        providerRef: messageId,
        calls: 1,
      });
    } finally {
      await worker.stop();
    }
  });

  it("'reconcile' without an event goes to an operator; once the event is in, an operator retry settles it without a POST (fault: effect then reset)", async () => {
    fake.inject({ kind: 'reset', commit: true });
    const wf = oneStep(name('reconcile_late'), async (ctx) =>
      idempotentMail(fake.mailService(), ctx, { onUnknown: 'reconcile', quietPeriodMs: 0 }).send(
        receipt(),
      ),
    );
    const run = await runOnce(client, wf, {});
    expect(run.state).toBe('failed');
    const step = await stepOf(client, run.runId);
    expect(step.errors.at(-1)?.message).toMatch(/no SendGrid Event Webhook event recorded/);
    expect(fake.sendRequests).toHaveLength(1);

    await fake.deliverEvents(hookUrl, { types: ['processed'] });
    const worker = await startWorker(client, [wf]);
    try {
      await client.retry(run.runId, 'send');
      const done = await client.waitForRun(run.runId, { timeoutMs: 10_000, pollMs: 25 });
      expect(done.state).toBe('completed');
      expect(done.steps[0]?.output).toEqual({
        statusCode: 202,
        messageId: fake.sent[0]?.messageId,
      });
    } finally {
      await worker.stop();
    }
    expect(fake.sendRequests).toHaveLength(1);
  });

  it('a 400 is recorded as definitive: discarded at once, one POST (§ 5.2 #5; fault: invalid mail)', async () => {
    const wf = oneStep(name('bad'), async (ctx) =>
      idempotentMail(fake.mailService(), ctx, { quietPeriodMs: 0 }).send(
        receipt({ from: 'not-an-address' }),
      ),
    );
    const run = await runOnce(client, wf, {});
    expect(run.state).toBe('failed');
    const step = await stepOf(client, run.runId);
    expect(step.attempt).toBe(1);
    expect(step.errors).toHaveLength(1);
    expect(step.errors[0]?.kind).toBe('non_retryable');
    expect(step.errors[0]?.message).toMatch(/failed definitively/);
    expect(fake.sendRequests).toHaveLength(1);
    const entry = await getLedgerEntry(client, `${run.runId}:send`);
    expect(entry?.phase).toBe('failed');
    expect(entry?.error).toMatchObject({ status: 400, outcome: 'definitive' });
    expect(entry?.error?.reason).toMatch(/from email does not contain a valid address/);
  });

  it('a mail the SDK rejects before sending is definitive, with no request (fault: no recipient)', async () => {
    const wf = oneStep(name('sdk_reject'), async (ctx) =>
      idempotentMail(fake.mailService(), ctx).send({
        from: 'shop@example.com',
        subject: 's',
        text: 't',
      } as MailDataRequired),
    );
    const run = await runOnce(client, wf, {});
    expect(run.state).toBe('failed');
    const step = await stepOf(client, run.runId);
    expect(step.errors).toHaveLength(1);
    expect(step.errors[0]?.message).toMatch(/failed definitively/);
    const entry = await getLedgerEntry(client, `${run.runId}:send`);
    expect(entry?.error?.reason).toMatch(/rejected by the SDK before sending/);
    expect(fake.requests).toHaveLength(0);
  });

  it('the key is the same on every attempt and after an operator retry (faults: 429, then 503)', async () => {
    fake.inject({ kind: 'status', status: 429 }); // not sent → a snooze, no error entry
    fake.inject({ kind: 'status', status: 503 }); // ambiguous → retried, then 'fail'
    const wf = oneStep(name('stable'), async (ctx) =>
      idempotentMail(fake.mailService(), ctx, { quietPeriodMs: 0 }).send(receipt()),
    );
    const run = await runOnce(client, wf, {});
    expect(run.state).toBe('failed');
    const step = await stepOf(client, run.runId);
    expect(step.snoozes).toBe(1);
    expect(step.errors.map((e) => e.message)).toEqual([
      expect.stringMatching(/may or may not have taken effect \(HTTP 503/),
      expect.stringMatching(/unknown outcome/),
    ]);
    // The operator sees that SendGrid has nothing (the 503 did not commit) and retries.
    const key = `${run.runId}:send`;
    await resolveKey(client, key, { outcome: 'not_sent' });
    const worker = await startWorker(client, [wf]);
    try {
      await client.retry(run.runId, 'send');
      const done = await client.waitForRun(run.runId, { timeoutMs: 10_000, pollMs: 25 });
      expect(done.state).toBe('completed');
    } finally {
      await worker.stop();
    }
    expect(wireKeys()).toEqual([key, key, key]);
    expect(fake.effects).toBe(1);
    expect((await stepOf(client, run.runId)).attempt).toBe(4);
  });

  it('an array sends each message under its own key; a retry re-sends only the one that failed (fault: 429 for one recipient)', async () => {
    fake.inject(
      { kind: 'status', status: 429 },
      {
        match: (r) =>
          (r.json as { personalizations: { to: { email: string }[] }[] }).personalizations[0]?.to[0]
            ?.email === 'bob@example.com',
      },
    );
    const wf = oneStep(name('array'), async (ctx) =>
      idempotentMail(fake.mailService(), ctx).send([receipt(), receipt({ to: 'bob@example.com' })]),
    );
    const run = await runOnce(client, wf, {});
    expect(run.state).toBe('completed');
    // Bob's 429 snoozed the step (no attempt used); the next attempt replayed Ada's send.
    expectNoAttemptUsed(run.steps[0] as NonNullable<(typeof run.steps)[0]>, {
      maxAttempts: 5,
      used: 1,
    });
    const out = run.steps[0]?.output as unknown as SentMail[];
    expect(out.map((m) => m.messageId)).toEqual(fake.sent.map((m) => m.messageId));
    expect(fake.sendRequests).toHaveLength(3);
    expect(fake.effects).toBe(2);
    expect([...new Set(wireKeys())].sort()).toEqual([`${run.runId}:send:0`, `${run.runId}:send:1`]);
    expect(fake.sentWithKey(`${run.runId}:send:0`)).toHaveLength(1);
  });

  it('refused connection: not sent, retried at once with no operator (fault: ECONNREFUSED)', async () => {
    await fake.refuseConnections();
    const wf = oneStep(
      name('refused'),
      async (ctx) => idempotentMail(fake.mailService(), ctx, { quietPeriodMs: 0 }).send(receipt()),
      { backoff: () => 300 },
    );
    const worker = await startWorker(client, [wf]);
    try {
      const { runId } = await client.submit(wf, {});
      await waitFor(
        'the refused attempt',
        async () => (await stepOf(client, runId)).errors.length > 0,
      );
      await fake.resume();
      const run = await client.waitForRun(runId, { timeoutMs: 10_000, pollMs: 25 });
      expect(run.state).toBe('completed');
      expect(run.steps[0]?.errors[0]?.message).toMatch(/was not sent \(ECONNREFUSED\)/);
    } finally {
      await worker.stop();
    }
    expect(fake.sendRequests).toHaveLength(1);
    expect(fake.effects).toBe(1);
  });

  it('a timeout after the effect is an unknown outcome too (fault: effect then delay past the SDK timeout)', async () => {
    fake.inject({ kind: 'delay', ms: 2_000 });
    const wf = oneStep(name('timeout'), async (ctx) =>
      idempotentMail(fake.mailService({ timeoutMs: 200 }), ctx, { quietPeriodMs: 0 }).send(
        receipt(),
      ),
    );
    const run = await runOnce(client, wf, {});
    expect(run.state).toBe('failed');
    const step = await stepOf(client, run.runId);
    // createMailService's hard deadline (the timeout) fires before axios' own timeout.
    expect(step.errors[0]?.message).toMatch(/CYCLONE_DEADLINE_EXCEEDED/);
    expect(fake.sendRequests).toHaveLength(1);
  });

  it('within the quiet period an unknown outcome is "in progress": the step snoozes until it ends, never re-sent (fault: effect then reset)', async () => {
    fake.inject({ kind: 'reset', commit: true });
    const wf = oneStep(
      name('quiet'),
      async (ctx) =>
        idempotentMail(fake.mailService(), ctx, {
          onUnknown: 'recall',
          quietPeriodMs: 60_000,
        }).send(receipt()),
      { maxAttempts: 3 },
    );
    const worker = await startWorker(client, [wf]);
    try {
      const { runId } = await client.submit(wf, {});
      const step = await waitForSnoozes(client, runId, 1);
      expect(step.state).toBe('scheduled');
      const started = (await getLedgerEntry(client, `${runId}:send`))?.callStartedAt?.getTime();
      const until = step.scheduledAt.getTime() - (started ?? Number.NaN);
      expect(until).toBeGreaterThanOrEqual(60_000);
      expect(until).toBeLessThanOrEqual(60_500);
      expectNoAttemptUsed(step, { maxAttempts: 3, used: 1, errors: [/ECONNRESET/] });
      expect(fake.sendRequests).toHaveLength(1);
    } finally {
      await worker.stop();
    }
  });

  it('uses the mail service timeout for the default quiet period', async () => {
    fake.inject({ kind: 'reset', commit: true });
    const wf = oneStep(
      name('qp'),
      async (ctx) => idempotentMail(fake.mailService({ timeoutMs: 1_000 }), ctx).send(receipt()),
      { maxAttempts: 2 },
    );
    const worker = await startWorker(client, [wf]);
    try {
      const { runId } = await client.submit(wf, {});
      const step = await waitForSnoozes(client, runId, 1);
      const started = (await getLedgerEntry(client, `${runId}:send`))?.callStartedAt?.getTime();
      // 1,000 ms timeout + 5,000 ms margin after the call started, plus the snooze's 100 ms.
      const until = step.scheduledAt.getTime() - (started ?? Number.NaN);
      expect(until).toBeGreaterThanOrEqual(6_000);
      expect(until).toBeLessThanOrEqual(6_500);
      expect(fake.sendRequests).toHaveLength(1);
    } finally {
      await worker.stop();
    }
  });

  it("a lost response with backoff 300 ms and 6 attempts: the step snoozes out the quiet period, then policy 'fail' discards it with the unknown-outcome error (fault: effect then reset)", async () => {
    fake.inject({ kind: 'reset', commit: true });
    const quietPeriodMs = 3_000;
    const wf = oneStep(
      name('quiet_fail'),
      async (ctx) =>
        idempotentMail(fake.mailService(), ctx, { onUnknown: 'fail', quietPeriodMs }).send(
          receipt(),
        ),
      { backoff: () => 300, maxAttempts: 6 },
    );
    const run = await runOnce(client, wf, {}, 20_000);
    expect(run.state).toBe('failed');
    const step = await stepOf(client, run.runId);
    expect(step.state).toBe('discarded');
    // The lost response, then the policy's verdict once the quiet period was over; waiting it
    // out used no attempt and left no "in progress" entry.
    expectNoAttemptUsed(step, {
      maxAttempts: 6,
      used: 2,
      errors: [
        /may or may not have taken effect \(ECONNRESET\)/,
        /^unknown outcome for idempotency key/,
      ],
    });
    expect(step.errors.map((e) => e.kind)).toEqual(['error', 'non_retryable']);
    expect(step.errors[1]?.message).not.toMatch(/quiet period|in progress/);
    const entry = await getLedgerEntry(client, `${run.runId}:send`);
    expect(entry).toMatchObject({ phase: 'unknown', calls: 1 });
    // The policy ran once the quiet period was over (its verdict's time).
    const verdictAt = Date.parse(step.errors[1]?.at ?? '');
    expect(verdictAt - (entry?.callStartedAt?.getTime() ?? 0)).toBeGreaterThanOrEqual(
      quietPeriodMs - 50,
    );
    expect(fake.sendRequests).toHaveLength(1);
    expect(fake.effects).toBe(1);
  });
});

describe('idempotentMail: a rate-limit answer is a snooze, not an attempt', () => {
  it('429 with Retry-After: 2 → recorded as not sent, the next send reaches SendGrid ≥ 2 s later with the same key, no attempt used (fault: 429 + Retry-After)', async () => {
    fake.inject({ kind: 'status', status: 429, headers: { 'retry-after': '2' } });
    const wf = oneStep(name('retry_after'), async (ctx) =>
      idempotentMail(fake.mailService(), ctx).send(receipt()),
    );
    const run = await runOnce(client, wf, {});
    expect(run.state).toBe('completed');
    expectNoAttemptUsed(await stepOf(client, run.runId), { maxAttempts: 5, used: 1 });
    const key = `${run.runId}:send`;
    const [first, second] = fake.sendRequests;
    expect(fake.sendRequests).toHaveLength(2);
    expect((second?.at.getTime() ?? 0) - (first?.at.getTime() ?? 0)).toBeGreaterThanOrEqual(2_000);
    expect(wireKeys()).toEqual([key, key]);
    expect(fake.effects).toBe(1);
    expect(await getLedgerEntry(client, key)).toMatchObject({
      phase: 'succeeded',
      calls: 2,
      error: { outcome: 'not_sent', status: 429 },
    });
  });

  it("429 with SendGrid's X-RateLimit-Reset (a Unix time): the next send comes at or after it (fault: 429 + X-RateLimit-Reset)", async () => {
    const reset = Math.ceil(Date.now() / 1000) + 2;
    fake.inject({
      kind: 'status',
      status: 429,
      headers: {
        'x-ratelimit-limit': '150',
        'x-ratelimit-remaining': '0',
        'x-ratelimit-reset': String(reset),
      },
    });
    const wf = oneStep(name('reset'), async (ctx) =>
      idempotentMail(fake.mailService(), ctx).send(receipt()),
    );
    const run = await runOnce(client, wf, {});
    expect(run.state).toBe('completed');
    expectNoAttemptUsed(await stepOf(client, run.runId), { maxAttempts: 5, used: 1 });
    expect(fake.sendRequests).toHaveLength(2);
    // 50 ms for clock reading granularity between this process and the database.
    expect(fake.sendRequests[1]?.at.getTime() ?? 0).toBeGreaterThanOrEqual(reset * 1000 - 50);
    expect(fake.effects).toBe(1);
  });
});

describe("idempotentMail: 'reconcile' with assumeNotSentAfterMs", () => {
  it('no event before it has passed is "in progress": the step snoozes and looks again, and the late event settles it, no resend (fault: effect then reset)', async () => {
    fake.inject({ kind: 'reset', commit: true });
    const wf = oneStep(
      name('keep_looking'),
      async (ctx) =>
        idempotentMail(fake.mailService(), ctx, {
          onUnknown: 'reconcile',
          quietPeriodMs: 0,
          assumeNotSentAfterMs: 60_000,
        }).send(receipt()),
      { maxAttempts: 3, backoff: () => 100 },
    );
    const worker = await startWorker(client, [wf]);
    try {
      const { runId } = await client.submit(wf, {});
      // The Event Webhook is late: the step keeps looking (or, wrongly, stops).
      const step = await waitForSnoozes(client, runId, 2);
      expect(step.state).toBe('scheduled');
      expectNoAttemptUsed(step, {
        maxAttempts: 3,
        used: 1,
        minSnoozes: 2,
        errors: [/may or may not have taken effect \(ECONNRESET\)/],
      });

      // SendGrid's events arrive: the next look finds them.
      const d = await fake.deliverEvents(hookUrl, { types: ['processed'] });
      expect(d.status).toBe(200);
      const run = await client.waitForRun(runId, { timeoutMs: 10_000, pollMs: 25 });
      expect(run.state).toBe('completed');
      const messageId = fake.sent[0]?.messageId;
      expect(run.steps[0]?.output).toEqual({ statusCode: 202, messageId });
      expect(fake.sendRequests).toHaveLength(1);
      expect(fake.effects).toBe(1);
      expect(await getLedgerEntry(client, `${runId}:send`)).toMatchObject({
        phase: 'succeeded',
        providerRef: messageId,
        calls: 1,
      });
    } finally {
      await worker.stop();
    }
  });

  it('once it has passed with no event, the e-mail is sent again under the same key; not before (fault: reset before the effect)', async () => {
    fake.inject({ kind: 'reset', commit: false });
    const assumeNotSentAfterMs = 1_500;
    const wf = oneStep(
      name('assume'),
      async (ctx) =>
        idempotentMail(fake.mailService(), ctx, {
          onUnknown: 'reconcile',
          quietPeriodMs: 0,
          assumeNotSentAfterMs,
        }).send(receipt()),
      { maxAttempts: 3, backoff: () => 100 },
    );
    const run = await runOnce(client, wf, {});
    expect(run.state).toBe('completed');
    const step = await stepOf(client, run.runId);
    // Attempt 1 lost the call, attempt 2 looked (nothing: a snooze), the look after the
    // deadline sent again; the looks used no attempt.
    expectNoAttemptUsed(step, {
      maxAttempts: 3,
      used: 2,
      errors: [/may or may not have taken effect \(ECONNRESET\)/],
    });
    const key = `${run.runId}:send`;
    const [call1, call2] = fake.sendRequests;
    expect(fake.sendRequests).toHaveLength(2);
    expect(fake.effects).toBe(1);
    expect(wireKeys()).toEqual([key, key]);
    // The second POST came once assumeNotSentAfterMs had passed since the first call started
    // (stamped just before the first request; 50 ms for clock reading granularity).
    expect((call2?.at.getTime() ?? 0) - (call1?.at.getTime() ?? 0)).toBeGreaterThanOrEqual(
      assumeNotSentAfterMs - 50,
    );
    const messageId = fake.sent[0]?.messageId;
    expect(run.steps[0]?.output).toEqual({ statusCode: 202, messageId });
    expect(await getLedgerEntry(client, key)).toMatchObject({
      phase: 'succeeded',
      providerRef: messageId,
      calls: 2,
    });
  });
});
