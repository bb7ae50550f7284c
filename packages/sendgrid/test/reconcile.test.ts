/**
 * reconcile.ts: the Event Webhook handler against real PostgreSQL, fed by the fake's webhook emulation:
 * recording by `cyclone_key`, dedupe by `sg_event_id`, the Signed Event Webhook check.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { MailDataRequired } from '@sendgrid/mail';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventsForKey, eventWebhookListener, handleEventWebhook } from '../src/index.js';
import { FakeSendGrid } from '../src/testing/index.js';
import { createTestDb, type TestDb } from './support/db.js';

let db: TestDb;
let fake: FakeSendGrid;
let app: Server;
let url: string;

beforeAll(async () => {
  db = await createTestDb();
  fake = await FakeSendGrid.start({ signEvents: true });
  app = createServer(
    eventWebhookListener({ pool: db.pool, verificationKey: fake.verificationKey }),
  );
  await new Promise<void>((r) => app.listen(0, '127.0.0.1', () => r()));
  url = `http://127.0.0.1:${(app.address() as AddressInfo).port}/hooks/sendgrid`;
});
afterAll(async () => {
  await new Promise((r) => app?.close(r));
  await fake?.close();
  await db?.drop();
});

const mail = (key: string | undefined, to = 'ada@example.com'): MailDataRequired => ({
  to,
  from: 'shop@example.com',
  subject: 's',
  text: 't',
  ...(key
    ? { customArgs: { cyclone_key: key, cyclone_run: '00000000-0000-4000-8000-000000000001' } }
    : {}),
});

describe('Event Webhook handler', () => {
  it('records signed events carrying a cyclone_key, once per sg_event_id', async () => {
    const [res] = await fake.mailService().send(mail('run:k1'));
    const sent = fake.sent.at(-1);
    if (!sent) throw new Error('not sent');
    const d = await fake.deliverEvents(url, { mails: [sent] });
    expect(d.status).toBe(200);
    expect(JSON.parse(d.body)).toMatchObject({ recorded: 2, ignored: 0 });
    // SendGrid retries a delivery: the same events again are not recorded twice.
    const again = await fake.deliverEvents(url, { events: d.events });
    expect(JSON.parse(again.body)).toMatchObject({ recorded: 0 });
    const events = await eventsForKey({ pool: db.pool }, 'run:k1');
    expect(events.map((e) => e.event).sort()).toEqual(['delivered', 'processed']);
    expect(events.every((e) => e.messageId === res.headers['x-message-id'])).toBe(true);
    const { rows } = await db.pool.query(
      `SELECT DISTINCT run_id::text FROM cyclone.cyclone_sendgrid_events WHERE cyclone_key = 'run:k1'`,
    );
    expect(rows).toEqual([{ run_id: '00000000-0000-4000-8000-000000000001' }]);
  });

  it('ignores events without a cyclone_key', async () => {
    await fake.mailService().send(mail(undefined, 'x@example.com'));
    const sent = fake.sent.at(-1) as NonNullable<(typeof fake.sent)[number]>;
    const d = await fake.deliverEvents(url, { mails: [sent] });
    expect(JSON.parse(d.body)).toMatchObject({ recorded: 0, ignored: 2 });
  });

  it('refuses a forged or unsigned request with 403 and records nothing', async () => {
    const forged = await fetch(url, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'x-twilio-email-event-webhook-signature': 'MEUCIQDforged',
        'x-twilio-email-event-webhook-timestamp': '1700000000',
      },
      body: JSON.stringify([
        { event: 'processed', sg_event_id: 'forged-1', cyclone_key: 'run:forged' },
      ]),
    });
    expect(forged.status).toBe(403);
    const unsigned = await handleEventWebhook(
      { pool: db.pool, verificationKey: fake.verificationKey },
      { body: '[]', headers: {} },
    );
    expect(unsigned.status).toBe(403);
    expect(await eventsForKey({ pool: db.pool }, 'run:forged')).toEqual([]);
  });

  it('answers 400 to a body that is not a JSON array (no key configured)', async () => {
    const r1 = await handleEventWebhook({ pool: db.pool }, { body: '{"a":1}', headers: {} });
    expect(r1.status).toBe(400);
    const r2 = await handleEventWebhook({ pool: db.pool }, { body: 'nope', headers: {} });
    expect(r2.status).toBe(400);
  });
});
