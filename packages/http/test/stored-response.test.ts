/** What the ledger keeps of an answer, and the Response a replay gets back. */
import { describe, expect, it } from 'vitest';
import { DEFAULT_KEPT_HEADERS, headersOf, toResponse, toStored } from '../src/stored-response.js';

const keep = new Set([...DEFAULT_KEPT_HEADERS, 'x-kept']);

async function stored(res: Response) {
  const bytes = new Uint8Array(await res.clone().arrayBuffer());
  return toStored(res, bytes, headersOf(res), keep);
}

describe('toStored / toResponse', () => {
  it('keeps status, the kept headers and a text body; drops set-cookie, date and lengths', async () => {
    const res = new Response('{"id":"shp_1"}', {
      status: 201,
      statusText: 'Created',
      headers: {
        'content-type': 'application/json',
        location: '/v1/shipments/shp_1',
        'set-cookie': 'session=secret',
        date: 'Tue, 01 Dec 2026 10:00:00 GMT',
        'x-kept': 'yes',
        'x-other': 'no',
      },
    });
    const s = await stored(res);
    expect(s).toMatchObject({
      status: 201,
      statusText: 'Created',
      body: '{"id":"shp_1"}',
      bodyEncoding: 'utf8',
      headers: {
        'content-type': 'application/json',
        location: '/v1/shipments/shp_1',
        'x-kept': 'yes',
      },
    });
    expect(Object.keys(s.headers).sort()).toEqual(['content-type', 'location', 'x-kept']);
    const first = toResponse(s, false);
    expect(first.status).toBe(201);
    expect(first.headers.get('cyclone-replayed')).toBeNull();
    expect(await first.json()).toEqual({ id: 'shp_1' });
    const again = toResponse(JSON.parse(JSON.stringify(s)), true);
    expect(again.headers.get('cyclone-replayed')).toBe('ledger');
    expect(again.statusText).toBe('Created');
  });

  it('a binary body is stored as base64 and comes back byte for byte', async () => {
    const pdf = new Uint8Array([0x25, 0x50, 0x44, 0x46, 0x00, 0xff, 0xfe]);
    const s = await stored(new Response(pdf, { headers: { 'content-type': 'application/pdf' } }));
    expect(s.bodyEncoding).toBe('base64');
    expect(new Uint8Array(await toResponse(s, true).arrayBuffer())).toEqual(pdf);
  });

  it('a 204 has no body; an empty body is null', async () => {
    const s = await stored(new Response(null, { status: 204 }));
    expect(s.body).toBeNull();
    const r = toResponse(s, true);
    expect(r.status).toBe(204);
    expect(await r.text()).toBe('');
  });
});
