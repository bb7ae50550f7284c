/**
 * The fake API on its own, with plain fetch: the IETF draft's key semantics and each preset's
 * differences (FAKE_PROFILES), effects counted, and the shared fault vocabulary.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { FakeHttpApi, parseSfString } from '../src/testing/index.js';

let fake: FakeHttpApi | undefined;
afterEach(async () => {
  await fake?.close();
  fake = undefined;
});

const start = async (profile?: Parameters<typeof FakeHttpApi.start>[0]) => {
  fake = await FakeHttpApi.start(profile);
  return fake;
};

const post = (
  f: FakeHttpApi,
  body: unknown,
  headers: Record<string, string> = {},
  path = '/v1/shipments',
) =>
  fetch(`${f.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });

describe('the draft profile (default)', () => {
  it('first request: 201 and the object, one effect; the same key and body: the stored answer byte for byte, no effect', async () => {
    const f = await start();
    const a = await post(f, { to: 'Ada' }, { 'idempotency-key': 'k1' });
    expect(a.status).toBe(201);
    const first = await a.text();
    expect(JSON.parse(first)).toMatchObject({ id: 'shipment_1', object: 'shipments', to: 'Ada' });
    const b = await post(f, { to: 'Ada' }, { 'idempotency-key': 'k1' });
    expect(b.status).toBe(201);
    expect(await b.text()).toBe(first);
    expect(b.headers.get('idempotent-replayed')).toBe('true');
    expect(f.count()).toBe(1);
    expect(f.keyedRequests.map((r) => r.outcome)).toEqual(['executed', 'replayed']);
    // Without a key, every POST runs.
    await post(f, { to: 'Ada' });
    expect(f.count()).toBe(2);
    // The object reads back.
    expect(await (await fetch(`${f.url}/v1/shipments/shipment_1`)).json()).toMatchObject({
      to: 'Ada',
    });
  });

  it('the key with another body: 422; while the first is held: 409; then the first answer', async () => {
    const f = await start();
    const hold = f.inject({ kind: 'hold' });
    const first = post(f, { to: 'Ada' }, { 'idempotency-key': 'k1' });
    await f.waitForRequest((r) => r.fault === 'hold');
    const during = await post(f, { to: 'Ada' }, { 'idempotency-key': 'k1' });
    expect(during.status).toBe(409);
    hold.release();
    expect((await first).status).toBe(201);
    const other = await post(f, { to: 'Grace' }, { 'idempotency-key': 'k1' });
    expect(other.status).toBe(422);
    expect(other.headers.get('content-type')).toBe('application/problem+json');
    expect(f.count()).toBe(1);
    expect(f.keyedRequests.map((r) => r.outcome)).toEqual(['executed', 'conflict', 'mismatch']);
  });

  it('faults: a 429 on arrival is not stored (the next request runs); a committed 500 is stored and replayed; a reset after the effect loses the answer', async () => {
    const f = await start();
    f.inject({ kind: 'status', status: 429, headers: { 'retry-after': '1' } });
    const limited = await post(f, { n: 1 }, { 'idempotency-key': 'a' });
    expect(limited.status).toBe(429);
    expect(limited.headers.get('retry-after')).toBe('1');
    expect((await post(f, { n: 1 }, { 'idempotency-key': 'a' })).status).toBe(201);

    f.inject({ kind: 'status', status: 500, commit: true });
    expect((await post(f, { n: 2 }, { 'idempotency-key': 'b' })).status).toBe(500);
    expect((await post(f, { n: 2 }, { 'idempotency-key': 'b' })).status).toBe(500);

    f.inject({ kind: 'reset', commit: true });
    await expect(post(f, { n: 3 }, { 'idempotency-key': 'c' })).rejects.toThrow(/fetch failed/);
    expect((await post(f, { n: 3 }, { 'idempotency-key': 'c' })).status).toBe(201);
    expect(f.count()).toBe(3);
    expect(f.count('c')).toBe(1);
  });
});

describe('the presets’ differences', () => {
  it('ietf: the key is an sf-string ("…"); a bare token is a 400', async () => {
    const f = await start({ profile: 'ietf' });
    expect((await post(f, { n: 1 }, { 'idempotency-key': '"k:1"' })).status).toBe(201);
    expect(f.requests[0]?.key).toBe('k:1');
    expect((await post(f, { n: 1 }, { 'idempotency-key': 'k:1' })).status).toBe(400);
    expect(parseSfString('"a\\"b"')).toBe('a"b');
    expect(parseSfString('a"b')).toBeUndefined();
  });

  it('square: the key is the body field idempotency_key (left out of the request identity); over 45 characters is a 400; another body: 400 naming the key', async () => {
    const f = await start({ profile: 'square' });
    const a = await post(f, { amount: 100, idempotency_key: 'sq1' });
    expect(a.status).toBe(201);
    expect(await a.json()).not.toHaveProperty('idempotency_key');
    expect((await post(f, { idempotency_key: 'sq1', amount: 100 })).status).toBe(201);
    expect(f.count()).toBe(1);
    const other = await post(f, { amount: 200, idempotency_key: 'sq1' });
    expect(other.status).toBe(400);
    expect(await other.json()).toMatchObject({ errors: [{ code: 'IDEMPOTENCY_KEY_REUSED' }] });
    expect((await post(f, { amount: 1, idempotency_key: 'x'.repeat(46) })).status).toBe(400);
  });

  it('adyen: the key echoed; over 64 characters is a 400; a request while the first is held waits for it and gets its answer', async () => {
    const f = await start({ profile: 'adyen' });
    const hold = f.inject({ kind: 'hold' });
    const first = post(f, { amount: 1 }, { 'idempotency-key': 'ad1' });
    await f.waitForRequest((r) => r.fault === 'hold');
    const second = post(f, { amount: 1 }, { 'idempotency-key': 'ad1' });
    await f.waitForRequest((r) => r.seq === 2);
    hold.release();
    const [a, b] = await Promise.all([first, second]);
    expect(a.headers.get('idempotency-key')).toBe('ad1');
    expect(await b.text()).toBe(await a.text());
    expect(f.count()).toBe(1);
    expect((await post(f, { amount: 1 }, { 'idempotency-key': 'y'.repeat(65) })).status).toBe(400);
  });

  it('paypal: PayPal-Request-Id; a committed 5xx is not stored, a repeat gets what was done (the object), not a second effect; keys forgotten after 6 h', async () => {
    const f = await start({ profile: 'paypal' });
    f.inject({ kind: 'status', status: 500, commit: true });
    expect((await post(f, { n: 1 }, { 'paypal-request-id': 'p1' })).status).toBe(500);
    const again = await post(f, { n: 1 }, { 'paypal-request-id': 'p1' });
    expect(again.status).toBe(201);
    expect(f.count()).toBe(1);
    f.advanceTime(6 * 3_600_000);
    expect((await post(f, { n: 1 }, { 'paypal-request-id': 'p1' })).status).toBe(201);
    expect(f.count()).toBe(2);
  });

  it('easyship: a committed 500 is stored and replayed, as its docs say', async () => {
    const f = await start({ profile: 'easyship' });
    f.inject({ kind: 'status', status: 500, commit: true });
    expect((await post(f, { n: 1 }, { 'idempotency-key': 'e1' })).status).toBe(500);
    expect((await post(f, { n: 1 }, { 'idempotency-key': 'e1' })).status).toBe(500);
    expect(f.count()).toBe(1);
  });

  it('a responder decides the answer; a 4xx of the route has no effect and is not stored (unless the profile stores errors)', async () => {
    let n = 0;
    const f = await start({
      profile: 'adyen',
      respond: (_req, effect) =>
        ++n === 1
          ? { status: 422, body: { errorCode: '101', message: 'Invalid card number' } }
          : { status: 200, body: { pspReference: effect.id, resultCode: 'Authorised' } },
    });
    expect((await post(f, { card: 'x' }, { 'idempotency-key': 'r1' })).status).toBe(422);
    expect(f.count()).toBe(0);
    const ok = await post(f, { card: 'x' }, { 'idempotency-key': 'r1' });
    expect(ok.status).toBe(200);
    expect(await ok.json()).toMatchObject({ resultCode: 'Authorised' });
    expect(f.count()).toBe(1);
  });
});
