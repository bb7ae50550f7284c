/**
 * Request bodies made whole before anything is written: strings, JSON, URLSearchParams, bytes,
 * Blobs and a Request's body are taken (and hashed by their bytes); streamed bodies, async
 * iterables, FormData and plain objects are refused with UnsupportedBodyError. The key goes into
 * a header or a JSON body field, never over one the caller set.
 */
import { Readable } from 'node:stream';
import { IdempotencyUsageError } from '@cyclone/idempotency';
import { describe, expect, it } from 'vitest';
import { bodyDigest, checkKeyPlace, prepareRequest, withKey } from '../src/body.js';
import { UnsupportedBodyError } from '../src/errors.js';

const URL_ = 'https://api.example.com/v1/shipments';
const text = (b: Uint8Array | null) => new TextDecoder().decode(b ?? new Uint8Array());

describe('prepareRequest', () => {
  it('a string: its UTF-8 bytes, text/plain unless a content type was given; JSON keeps its type', async () => {
    const plain = await prepareRequest(URL_, { method: 'post', body: 'héllo' });
    expect(plain.method).toBe('POST');
    expect(text(plain.body)).toBe('héllo');
    expect(plain.headers.get('content-type')).toBe('text/plain;charset=UTF-8');
    const json = await prepareRequest(URL_, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ parcel: 1 }),
    });
    expect(text(json.body)).toBe('{"parcel":1}');
    expect(json.headers.get('content-type')).toBe('application/json');
  });

  it('URLSearchParams: the form encoding and its content type', async () => {
    const r = await prepareRequest(new URL(URL_), {
      method: 'POST',
      body: new URLSearchParams({ to: 'Ada Lovelace', weight: '2' }),
    });
    expect(text(r.body)).toBe('to=Ada+Lovelace&weight=2');
    expect(r.headers.get('content-type')).toBe('application/x-www-form-urlencoded;charset=UTF-8');
  });

  it('bytes: ArrayBuffer, a typed array view (only its window), DataView, Blob (its type)', async () => {
    const bytes = new Uint8Array([0, 1, 2, 3, 4, 5]);
    expect((await prepareRequest(URL_, { method: 'POST', body: bytes.buffer })).body).toEqual(
      bytes,
    );
    expect(
      (await prepareRequest(URL_, { method: 'POST', body: bytes.subarray(2, 4) })).body,
    ).toEqual(new Uint8Array([2, 3]));
    expect(
      (await prepareRequest(URL_, { method: 'POST', body: new DataView(bytes.buffer, 1, 2) })).body,
    ).toEqual(new Uint8Array([1, 2]));
    const blob = await prepareRequest(URL_, {
      method: 'POST',
      body: new Blob(['%PDF'], { type: 'application/pdf' }),
    });
    expect(text(blob.body)).toBe('%PDF');
    expect(blob.headers.get('content-type')).toBe('application/pdf');
  });

  it('a Request: its method, URL, headers and body (read whole); init overrides, as in fetch', async () => {
    const req = new Request(URL_, {
      method: 'POST',
      headers: { 'x-tenant': 't1', 'content-type': 'application/json' },
      body: '{"a":1}',
    });
    const r = await prepareRequest(req, { headers: { 'x-tenant': 't2' } });
    expect(r.method).toBe('POST');
    expect(r.url).toBe(URL_);
    expect(r.headers.get('x-tenant')).toBe('t2');
    expect(text(r.body)).toBe('{"a":1}');
    expect(req.bodyUsed).toBe(false);
  });

  it('keeps the other RequestInit fields, drops its signal (the wrapper has its own)', async () => {
    const r = await prepareRequest(URL_, {
      method: 'POST',
      body: 'x',
      redirect: 'manual',
      signal: new AbortController().signal,
    });
    expect(r.rest).toEqual({ redirect: 'manual' });
  });

  it('refuses a ReadableStream, a Node stream, an async iterable, FormData and a plain object', async () => {
    const cases: [unknown, string][] = [
      [new ReadableStream({ start: (c) => c.close() }), 'stream'],
      [Readable.from(['a']), 'stream'],
      [
        (async function* () {
          yield new Uint8Array([1]);
        })(),
        'async-iterable',
      ],
      [new FormData(), 'form-data'],
      [{ parcel: 1 }, 'object'],
    ];
    for (const [body, kind] of cases) {
      const err = await prepareRequest(URL_, {
        method: 'POST',
        body: body as RequestInit['body'],
      }).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(UnsupportedBodyError.isInstance(err), kind).toBe(true);
      expect(err).toMatchObject({ kind, code: 'HTTP_UNSUPPORTED_BODY', retryable: false });
    }
    const stream = await prepareRequest(URL_, {
      method: 'POST',
      body: new ReadableStream(),
      duplex: 'half',
    } as RequestInit).catch((e: Error) => e.message);
    expect(stream).toMatch(/cannot guard a streamed body.*neither hashed.*sent again/);
  });

  it('refuses a relative URL', async () => {
    await expect(prepareRequest('/v1/shipments', { method: 'POST' })).rejects.toThrow(
      IdempotencyUsageError,
    );
  });
});

describe('the key in the request', () => {
  it('in a header; a request that sets that header already is refused', async () => {
    const r = await prepareRequest(URL_, { method: 'POST', body: 'x' });
    expect(withKey(r, 'k1', { header: 'Idempotency-Key' }).headers.get('idempotency-key')).toBe(
      'k1',
    );
    const own = await prepareRequest(URL_, {
      method: 'POST',
      headers: { 'idempotency-key': 'mine' },
      body: 'x',
    });
    expect(() => checkKeyPlace(own, { header: 'Idempotency-Key' })).toThrow(/already has/);
  });

  it('in a JSON body field: set on the object, content type JSON by default; a body that is not a JSON object, or has the field, is refused', async () => {
    const r = await prepareRequest(URL_, { method: 'POST', body: '{"amount":100}' });
    r.headers.delete('content-type');
    const placed = withKey(r, 'k1', { field: 'idempotency_key' });
    expect(JSON.parse(text(placed.body))).toEqual({ amount: 100, idempotency_key: 'k1' });
    expect(placed.headers.get('content-type')).toBe('application/json');
    for (const body of ['[1]', 'amount=1', '{"idempotency_key":"mine"}']) {
      const bad = await prepareRequest(URL_, { method: 'POST', body });
      expect(() => checkKeyPlace(bad, { field: 'idempotency_key' }), body).toThrow(
        IdempotencyUsageError,
      );
    }
  });

  it('hashes bodies by their bytes', () => {
    expect(bodyDigest(null)).toBeNull();
    expect(bodyDigest(new TextEncoder().encode('a'))).toBe(
      'ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb',
    );
  });
});
