/**
 * DNS rebinding and the origin check, through the Node listener on a real server: a page of
 * another site whose name was made to resolve to this server sends its own name as `Host` and as
 * `Origin` (and `Sec-Fetch-Site: same-origin`), so comparing the two proves nothing; only a list
 * of the host names the UI answers to stops it. Without `authorize` that list is loopback by
 * default; `allowedHosts` names others. An origin is scheme, host and port: an https origin is
 * not this http server's. Bearer tokens with whitespace are refused when the hook is built.
 */
import { createServer, request, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Client, newAction, newWorkflow, silentLogger } from '@cyclone/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearerToken, createUi, type Ui } from '../src/index.js';
import { createTestDb, type TestDb } from './support/db.js';

const Parked = newWorkflow('parked-hosts', {
  nodes: { p: { action: newAction('p', async () => ({})) } },
});

let db: TestDb;
let client: Client;
let runId: string;
const servers: { server: Server; ui: Ui }[] = [];

beforeAll(async () => {
  db = await createTestDb();
  client = new Client({ connectionString: db.url, poolSize: 2, logger: silentLogger });
  runId = (await client.submit(Parked, {})).runId;
});

afterAll(async () => {
  for (const { server, ui } of servers) {
    await new Promise((resolve) => server.close(resolve));
    await ui.close();
  }
  await client?.close();
  await db?.drop();
});

/** A UI with `options` on a real server on 127.0.0.1; its port. */
async function serve(options: Partial<Parameters<typeof createUi>[0]> = {}): Promise<number> {
  const ui = createUi({ client, logger: silentLogger, ...options });
  const server = createServer(ui.nodeHandler);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  servers.push({ server, ui });
  return (server.address() as AddressInfo).port;
}

/** One raw HTTP request to 127.0.0.1:`port` with these headers (Host among them). */
function send(
  port: number,
  method: string,
  path: string,
  headers: Record<string, string>,
  body?: string,
): Promise<{ status: number; body: Record<string, unknown> }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, method, path, headers }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => {
        text += d;
      });
      res.on('end', () => {
        let parsed: Record<string, unknown> = {};
        try {
          parsed = text ? JSON.parse(text) : {};
        } catch {
          parsed = { text };
        }
        resolve({ status: res.statusCode ?? 0, body: parsed });
      });
    });
    req.on('error', reject);
    if (body !== undefined) req.write(body);
    req.end();
  });
}

const rebind = (port: number) => ({
  Host: `rebind.attacker.example:${port}`,
  Origin: `http://rebind.attacker.example:${port}`,
  'Sec-Fetch-Site': 'same-origin',
});
const action = { 'Content-Type': 'application/json', 'X-Cyclone-UI': '1' };

describe('DNS rebinding: the Host header', () => {
  it('without authorize, refuses a host other than loopback on pages, reads and actions', async () => {
    const port = await serve();
    for (const path of ['/', '/runs', '/api/meta', '/api/runs', `/api/runs/${runId}`]) {
      const res = await send(port, 'GET', path, rebind(port));
      expect(res.status, path).toBe(403);
      expect(res.body.error, path).toBe('host_not_allowed');
    }
    const cancel = await send(
      port,
      'POST',
      `/api/runs/${runId}/cancel`,
      { ...rebind(port), ...action },
      '{}',
    );
    expect(cancel).toMatchObject({ status: 403, body: { error: 'host_not_allowed' } });
    expect((await client.getRun(runId))?.state).toBe('running');
  });

  it('answers the loopback names, with or without the port', async () => {
    const port = await serve();
    for (const host of [`127.0.0.1:${port}`, `localhost:${port}`, `[::1]:${port}`, 'LOCALHOST']) {
      const res = await send(port, 'GET', '/api/meta', { Host: host });
      expect(res.status, host).toBe(200);
    }
  });

  it('keeps the health checks and robots.txt open to any host (probes send the pod address)', async () => {
    const port = await serve();
    expect((await send(port, 'GET', '/api/health/live', rebind(port))).status).toBe(200);
    expect((await send(port, 'GET', '/api/health/ready', rebind(port))).status).toBe(200);
    expect((await send(port, 'GET', '/robots.txt', rebind(port))).status).toBe(200);
  });

  it('answers only the names in allowedHosts, port-exact when one is given', async () => {
    const port = await serve({ allowedHosts: ['ops.example.com', 'proxy.internal:8080'] });
    expect((await send(port, 'GET', '/api/meta', { Host: 'ops.example.com' })).status).toBe(200);
    expect((await send(port, 'GET', '/api/meta', { Host: 'OPS.example.com:443' })).status).toBe(
      200,
    );
    expect((await send(port, 'GET', '/api/meta', { Host: `127.0.0.1:${port}` })).status).toBe(403);
    expect((await send(port, 'GET', '/api/meta', { Host: 'proxy.internal:8080' })).status).toBe(
      200,
    );
    expect((await send(port, 'GET', '/api/meta', { Host: 'proxy.internal:1' })).status).toBe(403);
    expect((await send(port, 'GET', '/api/meta', rebind(port))).status).toBe(403);
  });

  it('with authorize, answers any host unless allowedHosts is given', async () => {
    const auth = { Authorization: 'Bearer s3cret' };
    const open = await serve({ authorize: bearerToken('s3cret') });
    expect((await send(open, 'GET', '/api/meta', { ...rebind(open), ...auth })).status).toBe(200);
    const closed = await serve({ authorize: bearerToken('s3cret'), allowedHosts: ['ops.example'] });
    const res = await send(closed, 'GET', '/api/meta', { ...rebind(closed), ...auth });
    expect(res).toMatchObject({ status: 403, body: { error: 'host_not_allowed' } });
  });

  it('refuses a malformed allowedHosts entry when the UI is built', () => {
    expect(() => createUi({ client, allowedHosts: ['https://ops.example'] })).toThrow(TypeError);
    expect(() => createUi({ client, allowedHosts: [''] })).toThrow(TypeError);
  });
});

describe('the origin check compares the scheme', () => {
  it('refuses an https origin of the same host and port on this http server', async () => {
    const port = await serve();
    const headers = { Host: `127.0.0.1:${port}`, ...action };
    const https = await send(
      port,
      'POST',
      `/api/runs/${runId}/retry`,
      { ...headers, Origin: `https://127.0.0.1:${port}` },
      '{"node":"nope"}',
    );
    expect(https).toMatchObject({ status: 403, body: { error: 'csrf' } });
    const http = await send(
      port,
      'POST',
      `/api/runs/${runId}/retry`,
      { ...headers, Origin: `http://127.0.0.1:${port}` },
      '{"node":"nope"}',
    );
    expect(http).toMatchObject({ status: 404, body: { error: 'node_not_found' } });
  });
});

describe('bearer tokens and whitespace', () => {
  it('refuses a token that is blank or has whitespace when the hook is built', () => {
    expect(() => bearerToken(' ')).toThrow(TypeError);
    expect(() => bearerToken(' s3cret\n')).toThrow(TypeError);
    expect(() => bearerToken('s3 cret')).toThrow(TypeError);
  });

  it('takes a header with spaces around the token', async () => {
    const port = await serve({ authorize: bearerToken('s3cret') });
    const host = { Host: `127.0.0.1:${port}` };
    const spaced = await send(port, 'GET', '/api/meta', {
      ...host,
      Authorization: 'Bearer    s3cret  ',
    });
    expect(spaced.status).toBe(200);
    const wrong = await send(port, 'GET', '/api/meta', { ...host, Authorization: 'Bearer s3cre' });
    expect(wrong.status).toBe(401);
  });
});
