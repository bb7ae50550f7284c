/**
 * The response headers of each guarded create reach its own adapter call, even with concurrent
 * creates on one client (the SDK's exceptions drop them, and its `lastResponse` is shared), and
 * the wrapper changes nothing for calls outside an adapter call. The real `twilio` client against
 * the fake; no database.
 */
import { headerValue, type ResponseHeaders } from '@cyclone/idempotency';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { classifyTwilioError } from '../src/index.js';
import { type SeenResponse, withResponseHeaders } from '../src/response-headers.js';
import { FakeTwilio } from '../src/testing/index.js';

let fake: FakeTwilio;
beforeEach(async () => {
  fake = await FakeTwilio.start();
});
afterEach(async () => {
  await fake.close();
});

const FROM = '+15005550006';
const bodyIs = (body: string) => (r: { form: URLSearchParams }) => r.form.get('Body') === body;

async function rejection(p: Promise<unknown>): Promise<unknown> {
  try {
    await p;
  } catch (err) {
    return err;
  }
  throw new Error('expected a rejection');
}

describe('withResponseHeaders', () => {
  it("concurrent creates on one client each get their own answer's headers", async () => {
    const client = fake.client();
    fake.inject(
      { kind: 'status', status: 429, headers: { 'retry-after': '5' } },
      { match: bodyIs('a') },
    );
    fake.inject(
      { kind: 'status', status: 429, headers: { 'retry-after': '1' } },
      { match: bodyIs('b') },
    );
    const seen: SeenResponse[] = [{}, {}, {}];
    const create = (i: number, body: string) =>
      withResponseHeaders(client, seen[i] as SeenResponse, () =>
        client.messages.create({ to: '+15551230001', from: FROM, body }),
      );
    const [a, b, c] = await Promise.allSettled([create(0, 'a'), create(1, 'b'), create(2, 'c')]);
    expect(a.status).toBe('rejected');
    expect(b.status).toBe('rejected');
    expect(c.status).toBe('fulfilled');
    const classified = [a, b].map((r, i) =>
      classifyTwilioError((r as PromiseRejectedResult).reason, seen[i]?.headers as never),
    );
    expect(classified).toMatchObject([
      { kind: 'not_sent', rateLimited: true, retryAfterMs: 5_000, code: '20429' },
      { kind: 'not_sent', rateLimited: true, retryAfterMs: 1_000, code: '20429' },
    ]);
    expect(headerValue(seen[2]?.headers as ResponseHeaders, 'content-type')).toMatch(/json/);
  });

  it('outside an adapter call the wrapped client behaves as before (errors, results)', async () => {
    const client = fake.client();
    await withResponseHeaders(client, {}, async () => undefined); // wraps the client
    fake.inject({ kind: 'status', status: 429, headers: { 'retry-after': '2' } });
    const err = (await rejection(
      client.messages.create({ to: '+15551230001', from: FROM, body: 'x' }),
    )) as { status?: number; code?: number };
    expect(err).toMatchObject({ status: 429, code: 20429 });
    // Without the headers, a 429 is rate-limited with no time named: once() backs off.
    expect(classifyTwilioError(err).retryAfterMs).toBeUndefined();
    const m = await client.messages.create({ to: '+15551230001', from: FROM, body: 'y' });
    expect(m.sid).toMatch(/^SM/);
  });
});
