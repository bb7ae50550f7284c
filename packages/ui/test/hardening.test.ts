/**
 * Requests a careless client or an attacker sends, through the Node listener on a real server:
 * an action whose body comes chunked (no Content-Length, as from a streaming client or some
 * proxies) and an OPTIONS probe of the API must be answered like any other request, not 500;
 * values PostgreSQL cannot take (a NUL character, a cursor or age whose time it cannot hold) are
 * the request's fault, 400, not a 500 with an error in the log.
 */
import { createServer, request, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Client, type Logger, newAction, newWorkflow, silentLogger } from '@cyclone/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createUi, type Ui } from '../src/index.js';
import { createTestDb, type TestDb } from './support/db.js';

const Parked = newWorkflow('parked', {
  nodes: { p: { action: newAction('p', async () => ({})) } },
});

let db: TestDb;
let client: Client;
let ui: Ui;
let server: Server;
let port: number;
let runId: string;
const logged: string[] = [];
const logger: Logger = {
  ...silentLogger,
  error: (_fields: object, message?: string) => {
    logged.push(message ?? '');
  },
  child: () => logger,
};

beforeAll(async () => {
  db = await createTestDb();
  client = new Client({ connectionString: db.url, poolSize: 2, logger });
  ui = createUi({ client, logger });
  server = createServer(ui.nodeHandler);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  port = (server.address() as AddressInfo).port;
  runId = (await client.submit(Parked, {})).runId;
});

afterAll(async () => {
  await new Promise((resolve) => server?.close(resolve));
  await ui?.close();
  await client?.close();
  await db?.drop();
});

/** One raw HTTP request; `chunks` sent with Transfer-Encoding: chunked (no Content-Length). */
function send(
  method: string,
  path: string,
  headers: Record<string, string>,
  chunks: string[] = [],
): Promise<{ status: number; body: Record<string, unknown> }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, method, path, headers }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => {
        text += d;
      });
      res.on('end', () => {
        resolve({ status: res.statusCode ?? 0, body: text ? JSON.parse(text) : {} });
      });
    });
    req.on('error', reject);
    for (const c of chunks) req.write(c);
    req.end();
  });
}

const action = { 'Content-Type': 'application/json', 'X-Cyclone-UI': '1' };

describe('bodies without a length', () => {
  it('takes an action whose JSON body comes chunked', async () => {
    const res = await send('POST', `/api/runs/${runId}/retry`, action, ['{"node"', ':"nope"}']);
    expect(res).toMatchObject({ status: 404, body: { error: 'node_not_found' } });
    const cancel = await send('POST', `/api/runs/${runId}/cancel`, action, ['{', '}']);
    expect(cancel).toMatchObject({ status: 200, body: { cancelled: true } });
  });

  it('refuses a chunked body over the limit with 400, before the action', async () => {
    const over = client.maxPayloadBytes + 64 * 1024 + 1;
    const big = `{"node":"${'x'.repeat(over)}"}`;
    const res = await send('POST', `/api/runs/${runId}/retry`, action, [
      big.slice(0, 1000),
      big.slice(1000),
    ]);
    expect(res).toMatchObject({ status: 400, body: { error: 'bad_request' } });
    expect(res.body.message).toMatch(/too large/);
  });

  it('answers OPTIONS on the API as an unknown path, not a failure', async () => {
    const res = await send('OPTIONS', '/api/meta', {
      Origin: 'http://evil.example',
      'Access-Control-Request-Method': 'POST',
    });
    expect(res).toMatchObject({ status: 404, body: { error: 'not_found' } });
  });
});

describe('values PostgreSQL cannot take', () => {
  const cursorOf = (text: string) => Buffer.from(text, 'utf8').toString('base64url');

  it.each([
    ['a workflow filter with a NUL', '/api/runs?workflow=a%00b'],
    ['a throughput workflow with a NUL', '/api/stats/throughput?workflow=%00'],
    ['a ledger node with a NUL', `/api/runs/{run}/ledger?node=%00`],
    ['a step name with a NUL', `/api/runs/{run}/steps/a%00`],
    ['a cursor whose time PostgreSQL cannot read', '/api/runs?cursor={cursor}'],
    ['an age beyond any interval', '/api/unknown?olderThanMs=9007199254740991'],
  ])('%s is 400', async (_what, path) => {
    const cursor = cursorOf(`1|${runId}`);
    const res = await send('GET', path.replaceAll('{run}', runId).replace('{cursor}', cursor), {});
    expect(res).toMatchObject({ status: 400, body: { error: 'bad_request' } });
  });

  it('is 400 in a bulk action too, and none of them was logged as a failure', async () => {
    const res = await send('POST', '/api/runs/bulk', action, [
      JSON.stringify({ action: 'cancel', filter: { workflow: '\u0000' } }),
    ]);
    expect(res).toMatchObject({ status: 400, body: { error: 'bad_request' } });
    expect(logged).toEqual([]);
  });
});
