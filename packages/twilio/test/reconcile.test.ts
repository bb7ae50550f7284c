/**
 * reconcile.ts: the status-callback handler against real PostgreSQL, fed by the fake's signed callbacks:
 * `X-Twilio-Signature` verified with the real `twilio.validateRequest` over the public URL,
 * recording by `ck`, dedupe of repeated deliveries.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  callbacksForKey,
  handleStatusCallback,
  statusCallbackListener,
  statusCallbackUrl,
} from '../src/index.js';
import { FakeTwilio, twilioSignature } from '../src/testing/index.js';
import { createTestDb, type TestDb } from './support/db.js';

const PUBLIC = 'https://app.example.com';
const TO = '+15551230002';
const FROM = '+15005550006';

let db: TestDb;
let fake: FakeTwilio;
let app: Server;
let appOrigin: string;

beforeAll(async () => {
  db = await createTestDb();
  app = createServer((req, res) => {
    void listener(req, res);
  });
  await new Promise<void>((r) => app.listen(0, '127.0.0.1', () => r()));
  appOrigin = `http://127.0.0.1:${(app.address() as AddressInfo).port}`;
  fake = await FakeTwilio.start({
    autoAdvance: 'delivered',
    // Twilio calls the public URL; here it lands on the loopback app.
    callbackTarget: (u) => u.replace(PUBLIC, appOrigin),
  });
  listener = statusCallbackListener({
    pool: db.pool,
    authToken: fake.authToken,
    publicUrl: PUBLIC,
  });
});
let listener: ReturnType<typeof statusCallbackListener>;
afterAll(async () => {
  await fake?.close();
  await new Promise((r) => app?.close(r));
  await db?.drop();
});

describe('status-callback handler', () => {
  it('statusCallbackUrl adds ck (replacing one) and keeps the rest of the URL', () => {
    expect(statusCallbackUrl(`${PUBLIC}/hooks/twilio?x=1`, 'r:n')).toBe(
      `${PUBLIC}/hooks/twilio?x=1&ck=r%3An`,
    );
    expect(statusCallbackUrl(`${PUBLIC}/h?ck=old`, 'k')).toBe(`${PUBLIC}/h?ck=k`);
    expect(() => statusCallbackUrl('/relative', 'k')).toThrow(TypeError);
    expect(() => statusCallbackUrl(`${PUBLIC}/h`, 'k'.repeat(4000))).toThrow(/4000/);
  });

  it('records sent and delivered under the key, verified over the public URL', async () => {
    const cb = statusCallbackUrl(`${PUBLIC}/hooks/twilio/status`, 'run-1:sms');
    const m = await fake
      .client()
      .messages.create({ to: TO, from: FROM, body: 'x', statusCallback: cb });
    await fake.idle();
    expect(fake.callbacks.map((c) => c.status)).toEqual([204, 204]);
    const rows = await callbacksForKey({ pool: db.pool }, 'run-1:sms');
    expect(rows.map((r) => [r.messageSid, r.messageStatus])).toEqual([
      [m.sid, 'sent'],
      [m.sid, 'delivered'],
    ]);
    expect(rows[0]).toMatchObject({ to: TO, from: FROM, errorCode: null });
  });

  it('a repeated delivery is acknowledged and not recorded twice', async () => {
    const cb = statusCallbackUrl(`${PUBLIC}/hooks/twilio/status`, 'run-2:sms');
    const params = { MessageSid: `SM${'a'.repeat(32)}`, MessageStatus: 'sent', To: TO, From: FROM };
    const req = { url: cb, signature: twilioSignature(fake.authToken, cb, params), params };
    const opts = { pool: db.pool, authToken: fake.authToken };
    expect(await handleStatusCallback(opts, req)).toMatchObject({ status: 204, recorded: true });
    expect(await handleStatusCallback(opts, req)).toMatchObject({ status: 204, recorded: false });
    expect(await callbacksForKey({ pool: db.pool }, 'run-2:sms')).toHaveLength(1);
  });

  it('refuses a bad signature with 403 and records nothing', async () => {
    const cb = statusCallbackUrl(`${PUBLIC}/hooks/twilio/status`, 'run-3:sms');
    const params = { MessageSid: `SM${'b'.repeat(32)}`, MessageStatus: 'sent' };
    const res = await fetch(cb.replace(PUBLIC, appOrigin), {
      method: 'POST',
      headers: {
        'content-type': 'application/x-www-form-urlencoded',
        'x-twilio-signature': twilioSignature('not-the-token', cb, params),
      },
      body: new URLSearchParams(params).toString(),
    });
    expect(res.status).toBe(403);
    // Signed for another URL (another key): refused too.
    const other = statusCallbackUrl(`${PUBLIC}/hooks/twilio/status`, 'run-x:sms');
    const r2 = await handleStatusCallback(
      { pool: db.pool, authToken: fake.authToken },
      { url: cb, signature: twilioSignature(fake.authToken, other, params), params },
    );
    expect(r2.status).toBe(403);
    expect(await callbacksForKey({ pool: db.pool }, 'run-3:sms')).toEqual([]);
  });

  it('acknowledges a valid callback without ck, recording nothing', async () => {
    const url = `${PUBLIC}/hooks/twilio/status`;
    const params = { MessageSid: `SM${'c'.repeat(32)}`, MessageStatus: 'sent' };
    const r = await handleStatusCallback(
      { pool: db.pool, authToken: fake.authToken },
      { url, signature: twilioSignature(fake.authToken, url, params), params },
    );
    expect(r).toMatchObject({ status: 204, recorded: false });
  });
});
