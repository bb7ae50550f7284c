/**
 * The Twilio fake (PROVIDERS.md § 5.3) driven by the real `twilio` 6.x client through a
 * `RequestClient` subclass: wire shapes, Twilio's error classes, every fault of the contract,
 * list filters and paging, and status callbacks whose signature the real
 * `twilio.validateRequest` accepts.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import twilio from 'twilio';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { FakeTwilio, twilioProblem, twilioSignature } from '../src/testing/index.js';

let fake: FakeTwilio;
beforeEach(async () => {
  fake = await FakeTwilio.start();
});
afterEach(async () => {
  await fake.close();
});

const TO = '+15551230001';
const FROM = '+15005550006';

async function rejection(p: Promise<unknown>): Promise<Record<string, unknown>> {
  try {
    await p;
  } catch (err) {
    return err as Record<string, unknown>;
  }
  throw new Error('expected a rejection');
}

describe('FakeTwilio with the real SDK', () => {
  it('creates a message: 201, Twilio JSON, one effect, the form recorded', async () => {
    const m = await fake.client().messages.create({ to: TO, from: FROM, body: 'hi' });
    expect(m.sid).toMatch(/^SM[0-9a-f]{32}$/);
    expect(m.accountSid).toBe(fake.accountSid);
    expect(m.status).toBe('queued');
    expect(m.to).toBe(TO);
    expect(m.from).toBe(FROM);
    expect(m.body).toBe('hi');
    expect(m.direction).toBe('outbound-api');
    expect(m.dateCreated).toBeInstanceOf(Date); // RFC 2822 parsed by the SDK
    expect(m.dateSent).toBeNull();
    expect(m.numSegments).toBe('1');
    expect(m.priceUnit).toBe('USD');
    expect(fake.effects).toBe(1);

    const req = fake.createRequests[0];
    expect(req?.path).toBe(`/2010-04-01/Accounts/${fake.accountSid}/Messages.json`);
    expect(req?.headers['content-type']).toBe('application/x-www-form-urlencoded');
    expect(req?.headers['user-agent']).toMatch(/^twilio-node\/\d+\.\d+\.\d+ /);
    expect(req?.headers.authorization).toBe(
      `Basic ${Buffer.from(`${fake.accountSid}:${fake.authToken}`).toString('base64')}`,
    );
    expect(Object.fromEntries(req?.form ?? [])).toEqual({ To: TO, From: FROM, Body: 'hi' });
  });

  it('a Messaging Service message starts accepted', async () => {
    const m = await fake.client().messages.create({
      to: TO,
      messagingServiceSid: `MG${'0'.repeat(32)}`,
      body: 'hi',
    });
    expect(m.status).toBe('accepted');
    expect(m.from).toBeNull();
  });

  it('validation errors are RestExceptions with Twilio codes and no effect', async () => {
    const c = fake.client();
    const bad = await rejection(c.messages.create({ to: '+15005550001', from: FROM, body: 'x' }));
    expect(bad).toBeInstanceOf(twilio.RestException);
    expect(bad).toMatchObject({ status: 400, code: 21211 });
    expect(bad.moreInfo).toBe('https://www.twilio.com/docs/errors/21211');
    const unsub = await rejection(c.messages.create({ to: '+15005550004', from: FROM, body: 'x' }));
    expect(unsub).toMatchObject({ status: 400, code: 21610 });
    const noFrom = await rejection(c.messages.create({ to: TO, body: 'x' }));
    expect(noFrom).toMatchObject({ status: 400, code: 21603 });
    const noBody = await rejection(c.messages.create({ to: TO, from: FROM }));
    expect(noBody).toMatchObject({ status: 400, code: 21602 });
    expect(fake.effects).toBe(0);
  });

  it('a wrong auth token is a 401 20003', async () => {
    const c = twilio(fake.accountSid, 'wrong', {
      httpClient: fake.client().httpClient,
    });
    const err = await rejection(c.messages.create({ to: TO, from: FROM, body: 'x' }));
    expect(err).toMatchObject({ status: 401, code: 20003 });
  });

  it('status faults: legacy body → RestException, RFC 9457 body → TwilioServiceException', async () => {
    fake.inject({ kind: 'status', status: 429 });
    fake.inject({
      kind: 'status',
      status: 503,
      body: twilioProblem(503, 20503, 'Service Unavailable', 'try later'),
      commit: true,
    });
    const c = fake.client();
    const e429 = await rejection(c.messages.create({ to: TO, from: FROM, body: 'x' }));
    expect(e429).toBeInstanceOf(twilio.RestException);
    expect(e429).toMatchObject({ status: 429, code: 20429 });
    expect(fake.effects).toBe(0);
    const e503 = await rejection(c.messages.create({ to: TO, from: FROM, body: 'x' }));
    expect(e503.constructor.name).toBe('TwilioServiceException');
    expect(e503).toMatchObject({ status: 503, code: 20503, detail: 'try later' });
    expect(fake.effects).toBe(1); // committed, then answered 503
  });

  it('reset after the effect: AxiosError ECONNRESET, the message exists', async () => {
    fake.inject({ kind: 'reset', commit: true });
    const err = await rejection(fake.client().messages.create({ to: TO, from: FROM, body: 'x' }));
    expect(err.isAxiosError).toBe(true); // a raw AxiosError (PROVIDERS.md § 3.4)
    expect(err.code).toBe('ECONNRESET');
    expect(fake.effects).toBe(1);
  });

  it('reset before the effect: same error, no message', async () => {
    fake.inject({ kind: 'reset', commit: false });
    const err = await rejection(fake.client().messages.create({ to: TO, from: FROM, body: 'x' }));
    expect(err.code).toBe('ECONNRESET');
    expect(fake.effects).toBe(0);
  });

  it('delay past the SDK timeout after the effect: ECONNABORTED, one message', async () => {
    fake.inject({ kind: 'delay', ms: 1_000 });
    const c = fake.client({ timeoutMs: 100 });
    const err = await rejection(c.messages.create({ to: TO, from: FROM, body: 'x' }));
    expect(err.code).toBe('ECONNABORTED');
    expect(fake.effects).toBe(1);
  });

  it('refused connections: ECONNREFUSED and no request, until resumed', async () => {
    const c = fake.client();
    await c.messages.create({ to: TO, from: FROM, body: 'x' });
    await fake.refuseConnections();
    const err = await rejection(c.messages.create({ to: TO, from: FROM, body: 'x' }));
    expect(err.code).toBe('ECONNREFUSED');
    expect(fake.createRequests).toHaveLength(1);
    await fake.resume();
    await c.messages.create({ to: TO, from: FROM, body: 'x' });
    expect(fake.effects).toBe(2);
  });

  it('autoRetry is off by default: a 429 is answered once, no hidden re-POST', async () => {
    fake.inject({ kind: 'status', status: 429 }, { times: 3 });
    await rejection(fake.client().messages.create({ to: TO, from: FROM, body: 'x' }));
    expect(fake.createRequests).toHaveLength(1);
  });

  it('lists with To/From/DateSent> filters (date granularity), newest first, following pages', async () => {
    const c = fake.client();
    const yesterday = new Date(Date.now() - 86_400_000);
    fake.seedMessage({ to: TO, from: FROM, body: 'old', dateCreated: yesterday });
    fake.seedMessage({ to: '+15551239999', from: FROM, body: 'other recipient' });
    fake.seedMessage({ to: TO, from: FROM, body: 'not sent yet', status: 'queued' });
    for (const body of ['a', 'b', 'c']) await c.messages.create({ to: TO, from: FROM, body });
    await fake.idle(); // autoAdvance: sent (date_sent set)
    const today = new Date();
    today.setUTCHours(0, 0, 0, 0);
    const list = await c.messages.list({ to: TO, from: FROM, dateSentAfter: today, pageSize: 2 });
    expect(list.map((m) => m.body)).toEqual(['c', 'b', 'a']);
    expect(list.every((m) => m.status === 'sent' && m.dateSent instanceof Date)).toBe(true);
    const lists = fake.requests.filter((r) => r.route === 'list');
    expect(lists).toHaveLength(2); // followed next_page_uri
    expect(lists[0]?.query.get('DateSent>')).toBe(`${today.toISOString().slice(0, 10)}T00:00:00Z`);
    const all = await c.messages.list({ to: TO });
    expect(all.map((m) => m.body)).toContain('old');
    expect(all.map((m) => m.body)).toContain('not sent yet');
  });

  it('fetches a message by SID; an unknown SID is a 404 20404', async () => {
    const c = fake.client();
    const m = await c.messages.create({ to: TO, from: FROM, body: 'x' });
    expect((await c.messages(m.sid).fetch()).sid).toBe(m.sid);
    const err = await rejection(c.messages(`SM${'f'.repeat(32)}`).fetch());
    expect(err).toMatchObject({ status: 404, code: 20404 });
  });

  it('start({ port }) listens on that port: a fake started again there serves a client made before; a taken port is EADDRINUSE', async () => {
    const { port, origin, accountSid, authToken } = fake;
    expect(port).toBeGreaterThan(0); // default: a free port
    const c = fake.client(); // bound to this origin; no request before the restart
    await fake.close();
    fake = await FakeTwilio.start({ port, accountSid, authToken });
    expect(fake.port).toBe(port);
    expect(fake.origin).toBe(origin);
    await c.messages.create({ to: TO, from: FROM, body: 'x' });
    expect(fake.effects).toBe(1);
    await expect(FakeTwilio.start({ port })).rejects.toMatchObject({ code: 'EADDRINUSE' });
  });

  it('faults can target the list route', async () => {
    fake.inject({ kind: 'status', status: 500 }, { route: 'list' });
    const c = fake.client();
    await c.messages.create({ to: TO, from: FROM, body: 'x' });
    const err = await rejection(c.messages.list({ to: TO }));
    expect(err).toMatchObject({ status: 500, code: 20500 });
  });
});

describe('status callbacks', () => {
  let app: Server;
  let got: { url: string; headers: Record<string, unknown>; body: string }[];
  let appOrigin: string;
  beforeEach(async () => {
    got = [];
    app = createServer((req, res) => {
      let body = '';
      req.on('data', (c) => {
        body += c;
      });
      req.on('end', () => {
        got.push({ url: req.url ?? '', headers: req.headers, body });
        res.end('<Response/>');
      });
    });
    await new Promise<void>((r) => app.listen(0, '127.0.0.1', () => r()));
    appOrigin = `http://127.0.0.1:${(app.address() as AddressInfo).port}`;
  });
  afterEach(async () => {
    await new Promise((r) => app.close(r));
  });

  it('posts sent (and delivered) with a signature the real validateRequest accepts', async () => {
    await fake.close();
    fake = await FakeTwilio.start({
      autoAdvance: 'delivered',
      callbackTarget: (u) => {
        const x = new URL(u);
        return `${appOrigin}${x.pathname}${x.search}`;
      },
    });
    const publicUrl = 'https://app.example.com/hooks/twilio/status?ck=run%3Anode';
    const m = await fake.client().messages.create({
      to: TO,
      from: FROM,
      body: 'x',
      statusCallback: publicUrl,
    });
    await fake.idle();
    expect(got.map((g) => new URLSearchParams(g.body).get('MessageStatus'))).toEqual([
      'sent',
      'delivered',
    ]);
    for (const g of got) {
      expect(g.url).toBe('/hooks/twilio/status?ck=run%3Anode');
      const params = Object.fromEntries(new URLSearchParams(g.body));
      expect(params.MessageSid).toBe(m.sid);
      const sig = g.headers['x-twilio-signature'] as string;
      expect(twilio.validateRequest(fake.authToken, sig, publicUrl, params)).toBe(true);
      expect(twilio.validateRequest('another-token', sig, publicUrl, params)).toBe(false);
      expect(twilio.validateRequest(fake.authToken, sig, `${publicUrl}x`, params)).toBe(false);
    }
    expect(fake.callbacks.map((c) => c.status)).toEqual([200, 200]);
  });

  it('twilioSignature matches the SDK helper', () => {
    const params = { b: '2', a: '1', MessageSid: 'SMx' };
    expect(twilioSignature('tok', 'https://x.test/p?q=1', params)).toBe(
      twilio.getExpectedTwilioSignature('tok', 'https://x.test/p?q=1', params),
    );
  });

  it('no callback without StatusCallback; advance() drives statuses by hand', async () => {
    await fake.close();
    fake = await FakeTwilio.start({ autoAdvance: 'none' });
    const c = fake.client();
    const m = await c.messages.create({
      to: TO,
      from: FROM,
      body: 'x',
      statusCallback: `${appOrigin}/cb?ck=k1`,
    });
    await fake.idle();
    expect(got).toHaveLength(0);
    expect(fake.message(m.sid).status).toBe('queued');
    const d = await fake.advance(m.sid, 'failed', { code: 30003, message: 'Unreachable' });
    expect(d?.params).toMatchObject({ MessageStatus: 'failed', ErrorCode: '30003' });
    expect((await c.messages(m.sid).fetch()).errorCode).toBe(30003);
  });
});
