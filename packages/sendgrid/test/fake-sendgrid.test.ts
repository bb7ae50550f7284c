/**
 * The SendGrid fake (PROVIDERS.md § 5.2) driven by the real `@sendgrid/mail` 8.1.x: the wire
 * shapes the SDK sends and accepts, every fault of the contract, effect counting, and the Event
 * Webhook emulation (signature checked with the real `@sendgrid/eventwebhook`).
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { EventWebhook } from '@sendgrid/eventwebhook';
import type { MailDataRequired } from '@sendgrid/mail';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createMailService } from '../src/index.js';
import { FakeSendGrid } from '../src/testing/index.js';

let fake: FakeSendGrid;
beforeEach(async () => {
  fake = await FakeSendGrid.start();
});
afterEach(async () => {
  await fake.close();
});

const msg = (over: Partial<MailDataRequired> = {}): MailDataRequired =>
  ({
    to: 'ada@example.com',
    from: 'shop@example.com',
    subject: 'Your receipt',
    text: 'Thanks!',
    customArgs: { cyclone_key: 'run-1:receipt' },
    ...over,
  }) as MailDataRequired;

/** The error a promise rejects with. */
async function rejection(p: Promise<unknown>): Promise<Record<string, unknown>> {
  try {
    await p;
  } catch (err) {
    return err as Record<string, unknown>;
  }
  throw new Error('expected a rejection');
}

describe('FakeSendGrid with the real SDK', () => {
  it('accepts a mail: 202, empty body, X-Message-Id, one effect, the request recorded', async () => {
    const [res, body] = await fake.mailService().send(msg({ headers: { 'X-Trace': 't1' } }));
    expect(res.statusCode).toBe(202);
    expect(res.body).toBe('');
    expect(body).toBe('');
    const id = res.headers['x-message-id'];
    expect(id).toMatch(/^[A-Za-z0-9_-]{22}$/);
    expect(fake.effects).toBe(1);
    expect(fake.sent[0]?.messageId).toBe(id);
    expect(fake.sent[0]?.recipients).toEqual(['ada@example.com']);
    expect(fake.sentWithKey('run-1:receipt')).toHaveLength(1);

    const req = fake.sendRequests[0];
    expect(req?.method).toBe('POST');
    expect(req?.path).toBe('/v3/mail/send');
    expect(req?.headers.authorization).toBe('Bearer SG.test');
    expect(req?.headers['content-type']).toBe('application/json');
    expect(req?.headers['user-agent']).toMatch(/^sendgrid\/\d+\.\d+\.\d+;nodejs$/);
    // The SDK quirk (PROVIDERS.md § 2.3): mail headers also travel as HTTP headers.
    expect(req?.headers['x-trace']).toBe('t1');
    expect(req?.json).toMatchObject({
      personalizations: [{ to: [{ email: 'ada@example.com' }] }],
      from: { email: 'shop@example.com' },
      subject: 'Your receipt',
      content: [{ type: 'text/plain', value: 'Thanks!' }],
      custom_args: { cyclone_key: 'run-1:receipt' },
      headers: { 'X-Trace': 't1' },
    });
  });

  it('an array of mails is one request and one effect per mail', async () => {
    const out = (await fake
      .mailService()
      .send([msg(), msg({ to: 'bob@example.com' })])) as unknown as [
      { headers: Record<string, string> },
    ][];
    expect(out).toHaveLength(2);
    expect(fake.effects).toBe(2);
    expect(new Set(out.map(([r]) => r.headers['x-message-id'])).size).toBe(2);
  });

  it('answers 400 with SendGrid errors for an invalid mail, without an effect', async () => {
    const err = await rejection(fake.mailService().send(msg({ from: 'not-an-address' })));
    expect(err.constructor.name).toBe('ResponseError');
    expect(err.code).toBe(400);
    expect((err.response as { body: unknown }).body).toEqual({
      errors: [
        {
          message: 'The from email does not contain a valid address.',
          field: 'from.email',
          help: null,
        },
      ],
    });
    expect(fake.effects).toBe(0);
  });

  it('answers 401 for another API key', async () => {
    const mail = createMailService({ apiKey: 'SG.other', baseUrl: fake.baseUrl });
    const err = await rejection(mail.send(msg()));
    expect(err.code).toBe(401);
    expect(fake.effects).toBe(0);
  });

  it('status faults: error body, no effect unless commit', async () => {
    fake.inject({ kind: 'status', status: 429 });
    fake.inject({ kind: 'status', status: 500, commit: true });
    const mail = fake.mailService();
    const e429 = await rejection(mail.send(msg()));
    expect(e429.code).toBe(429);
    expect((e429.response as { body: unknown }).body).toEqual({
      errors: [{ message: 'too many requests', field: null, help: null }],
    });
    expect(fake.effects).toBe(0);
    const e500 = await rejection(mail.send(msg()));
    expect(e500.code).toBe(500);
    expect(fake.effects).toBe(1);
    expect(fake.sendRequests.map((r) => r.fault)).toEqual(['status', 'status']);
  });

  it('reset after the effect: the SDK sees ECONNRESET without a response, the mail was sent', async () => {
    fake.inject({ kind: 'reset', commit: true });
    const err = await rejection(fake.mailService().send(msg()));
    expect(err.code).toBe('ECONNRESET');
    expect(err.response).toBeUndefined();
    expect(fake.effects).toBe(1);
  });

  it('reset before the effect: same error for the SDK, nothing sent', async () => {
    fake.inject({ kind: 'reset', commit: false });
    const err = await rejection(fake.mailService().send(msg()));
    expect(err.code).toBe('ECONNRESET');
    expect(fake.effects).toBe(0);
  });

  it("delay past the timeout after the effect: the hard deadline (before axios' own timeout), one effect", async () => {
    fake.inject({ kind: 'delay', ms: 1_000 });
    const err = await rejection(fake.mailService({ timeoutMs: 100 }).send(msg()));
    expect(err.code).toBe('CYCLONE_DEADLINE_EXCEEDED');
    expect(fake.effects).toBe(1);
  });

  it('delay within the timeout answers normally', async () => {
    fake.inject({ kind: 'delay', ms: 50 });
    const [res] = await fake.mailService({ timeoutMs: 2_000 }).send(msg());
    expect(res.statusCode).toBe(202);
    expect(fake.effects).toBe(1);
  });

  it('refused connections: ECONNREFUSED, nothing recorded, until resumed', async () => {
    const mail = fake.mailService();
    await mail.send(msg()); // a keep-alive socket now exists
    await fake.refuseConnections();
    const err = await rejection(mail.send(msg()));
    expect(err.code).toBe('ECONNREFUSED');
    expect(fake.sendRequests).toHaveLength(1);
    await fake.resume();
    await mail.send(msg());
    expect(fake.effects).toBe(2);
  });

  it('start({ port }) listens on that port: a fake started again there serves a mail service made before; a taken port is EADDRINUSE', async () => {
    const { port, baseUrl } = fake;
    expect(port).toBeGreaterThan(0); // default: a free port
    const mail = fake.mailService(); // bound to this base URL; no request before the restart
    await fake.close();
    fake = await FakeSendGrid.start({ port });
    expect(fake.port).toBe(port);
    expect(fake.baseUrl).toBe(baseUrl);
    const [res] = await mail.send(msg());
    expect(res.statusCode).toBe(202);
    expect(fake.effects).toBe(1);
    await expect(FakeSendGrid.start({ port })).rejects.toMatchObject({ code: 'EADDRINUSE' });
  });

  it('faults apply in order, `times` times, to their route only', async () => {
    fake.inject({ kind: 'status', status: 503 }, { times: 2 });
    expect(fake.pendingFaults).toBe(2);
    const mail = fake.mailService();
    expect((await rejection(mail.send(msg()))).code).toBe(503);
    expect((await rejection(mail.send(msg()))).code).toBe(503);
    const [ok] = await mail.send(msg());
    expect(ok.statusCode).toBe(202);
    expect(fake.pendingFaults).toBe(0);
  });
});

describe('Event Webhook emulation', () => {
  let app: Server;
  let received: { headers: Record<string, unknown>; body: string }[];
  let url: string;
  beforeEach(async () => {
    received = [];
    app = createServer((req, res) => {
      let body = '';
      req.on('data', (c) => {
        body += c;
      });
      req.on('end', () => {
        received.push({ headers: req.headers, body });
        res.end('ok');
      });
    });
    await new Promise<void>((r) => app.listen(0, '127.0.0.1', () => r()));
    url = `http://127.0.0.1:${(app.address() as AddressInfo).port}/hooks/sendgrid`;
  });
  afterEach(async () => {
    await new Promise((r) => app.close(r));
  });

  it('posts processed + delivered per recipient with custom_args and the X-Message-Id prefix', async () => {
    const [res] = await fake.mailService().send(msg());
    const delivery = await fake.deliverEvents(url);
    expect(delivery.status).toBe(200);
    const events = JSON.parse(received[0]?.body ?? '[]') as Record<string, unknown>[];
    expect(events.map((e) => e.event)).toEqual(['processed', 'delivered']);
    for (const e of events) {
      expect(e.email).toBe('ada@example.com');
      expect(e.cyclone_key).toBe('run-1:receipt');
      expect(String(e.sg_message_id).split('.')[0]).toBe(res.headers['x-message-id']);
    }
  });

  it('signs like the Signed Event Webhook: the real @sendgrid/eventwebhook verifies it', async () => {
    const signed = await FakeSendGrid.start({ signEvents: true });
    try {
      await signed.mailService().send(msg());
      await signed.deliverEvents(url);
      const { headers, body } = received[0] as { headers: Record<string, string>; body: string };
      const ew = new EventWebhook();
      const key = ew.convertPublicKeyToECDSA(signed.verificationKey);
      const sig = headers['x-twilio-email-event-webhook-signature'] as string;
      const ts = headers['x-twilio-email-event-webhook-timestamp'] as string;
      expect(ew.verifySignature(key, body, sig, ts)).toBe(true);
      expect(ew.verifySignature(key, body.replace('delivered', 'bounce'), sig, ts)).toBe(false);
    } finally {
      await signed.close();
    }
  });
});
