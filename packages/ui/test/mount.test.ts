/**
 * The UI mounted in Express, Fastify and Hono (packages/ui/examples), each under the base path
 * with the host's own routes beside it; and the pages: index.html rendered with the runtime base
 * path and config, deep links, assets, and nothing outside the built folder.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { serve } from '@hono/node-server';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expressApp } from '../examples/express.js';
import { fastifyApp } from '../examples/fastify.js';
import { honoApp } from '../examples/hono.js';
import { createUi, type Ui } from '../src/index.js';
import type { MetaResponse, UiConfig } from '../src/shared/api.js';
import { BASE, type Fixture, getJson, Parked, postJson, startFixture } from './support/harness.js';

let f: Fixture;
let assetsDir: string;
const APP_JS = 'console.log("cyclone ui");\n';

beforeAll(async () => {
  f = await startFixture();
  // A stand-in for the Vite build: the server must not care what the pages are.
  assetsDir = mkdtempSync(join(tmpdir(), 'cyclone-ui-assets-'));
  mkdirSync(join(assetsDir, 'assets'));
  writeFileSync(
    join(assetsDir, 'index.html'),
    '<!doctype html><html><head><!--cyclone:head--><script type="module" src="./assets/app-1a2b.js"></script></head><body><div id="root"></div></body></html>',
  );
  writeFileSync(join(assetsDir, 'assets', 'app-1a2b.js'), APP_JS);
  writeFileSync(join(assetsDir, 'favicon.svg'), '<svg xmlns="http://www.w3.org/2000/svg"/>');
});
afterAll(async () => {
  await f?.stop();
  if (assetsDir) rmSync(assetsDir, { recursive: true, force: true });
});

/** The config block index.html carries. */
function configOf(html: string): UiConfig {
  const m = /<script type="application\/json" id="cyclone-config">(.*?)<\/script>/.exec(html);
  if (!m?.[1]) throw new Error(`no config block in ${html.slice(0, 300)}`);
  return JSON.parse(m[1]) as UiConfig;
}

/** What every host must do with the UI mounted at BASE. */
async function exercise(origin: string, ui: Ui) {
  const url = `${origin}${BASE}`;
  // The host's own route is the host's.
  expect(await (await fetch(`${origin}/`)).json()).toEqual({ app: 'shop' });

  for (const path of ['/', '/runs/123e4567-e89b-42d3-a456-426614174000/nodes/b', '']) {
    const res = await fetch(`${url}${path}`);
    expect(res.status, path).toBe(200);
    const html = await res.text();
    expect(html).toContain(`<head><base href="${BASE}/"><script type="application/json"`);
    expect(configOf(html)).toMatchObject({ basePath: BASE, apiBase: `${BASE}/api` });
  }
  const asset = await fetch(`${url}/assets/app-1a2b.js`);
  expect(asset.status).toBe(200);
  expect(asset.headers.get('content-type')).toMatch(/^text\/javascript/);
  expect(asset.headers.get('cache-control')).toContain('immutable');
  expect(await asset.text()).toBe(APP_JS);

  const meta = await getJson<MetaResponse>(url, '/api/meta');
  expect(meta.body.basePath).toBe(BASE);
  // An action's JSON body reaches the UI through the host.
  const { runId } = await f.client.submit(Parked, {});
  expect(await postJson(origin, url, `/api/runs/${runId}/cancel`, {})).toMatchObject({
    status: 200,
    body: { runId, cancelled: true },
  });
  expect((await f.client.getRun(runId)).state).toBe('cancelled');
  // And a forged one is refused there too.
  const other = await f.client.submit(Parked, {});
  expect(
    await postJson(
      origin,
      url,
      `/api/runs/${other.runId}/cancel`,
      {},
      {
        origin: 'https://evil.example',
      },
    ),
  ).toMatchObject({ status: 403, body: { error: 'csrf' } });
  expect(ui.basePath).toBe(BASE);
}

describe('mounted in a framework (examples/)', () => {
  it('Express: app.use(basePath, ui.nodeHandler), behind express.json()', async () => {
    const ui = createUi({ client: f.client, basePath: BASE, assetsDir });
    const server = expressApp(ui).listen(0, '127.0.0.1');
    await new Promise((r) => server.once('listening', r));
    try {
      await exercise(`http://127.0.0.1:${(server.address() as AddressInfo).port}`, ui);
    } finally {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
      await ui.close();
    }
  });

  it('Fastify: a plugin at basePath handing the raw request to ui.nodeHandler', async () => {
    const ui = createUi({ client: f.client, basePath: BASE, assetsDir });
    const app = await fastifyApp(ui);
    const address = await app.listen({ port: 0, host: '127.0.0.1' });
    try {
      await exercise(address, ui);
    } finally {
      await app.close();
      await ui.close();
    }
  });

  it('Hono: app.mount(basePath, ui.fetch)', async () => {
    const ui = createUi({ client: f.client, basePath: BASE, assetsDir });
    const server = serve({ fetch: honoApp(ui).fetch, port: 0, hostname: '127.0.0.1' }) as Server;
    await new Promise((r) => server.once('listening', r));
    try {
      await exercise(`http://127.0.0.1:${(server.address() as AddressInfo).port}`, ui);
    } finally {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
      await ui.close();
    }
  });
});

describe('pages', () => {
  let ui: Ui;
  let server: Server;
  let origin: string;

  beforeAll(async () => {
    ui = createUi({
      client: f.client,
      basePath: '/ops/cyclone/',
      assetsDir,
      authorize: () => ({ user: 'ada</script><script>alert(1)</script>', can: { retry: true } }),
    });
    server = createServer(ui.nodeHandler);
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    server?.closeAllConnections();
    await new Promise((r) => server?.close(r));
    await ui?.close();
  });

  it('index.html carries the user and rights, escaped inside the config block', async () => {
    const html = await (await fetch(`${origin}${BASE}/`)).text();
    expect(html).not.toContain('<script>alert(1)');
    expect(configOf(html)).toMatchObject({
      basePath: BASE,
      user: 'ada</script><script>alert(1)</script>',
      can: { retry: true, cancel: false },
      readOnly: false,
    });
  });

  it('serves the same answers when a proxy already stripped the base path', async () => {
    const html = await (await fetch(`${origin}/runs`)).text();
    expect(configOf(html).basePath).toBe(BASE);
    expect((await getJson<MetaResponse>(origin, '/api/meta')).body.basePath).toBe(BASE);
  });

  it('a missing asset is 404, and no path reaches outside the built folder', async () => {
    expect((await fetch(`${origin}${BASE}/assets/gone-0000.js`)).status).toBe(404);
    for (const path of [
      '/..%2f..%2fpackage.json',
      '/assets/..%2f..%2fpackage.json',
      '/%2e%2e/package.json',
    ]) {
      const res = await fetch(`${origin}${BASE}${path}`);
      const text = await res.text();
      expect(text, path).not.toContain('"name"');
    }
    expect((await fetch(`${origin}${BASE}/favicon.svg`)).headers.get('content-type')).toBe(
      'image/svg+xml',
    );
  });

  it('refuses a base path with characters it cannot put in the page', () => {
    expect(() => createUi({ client: f.client, basePath: '/a"><script>' })).toThrow(TypeError);
    expect(() => createUi({ client: f.client, basePath: '/a/../b' })).toThrow(TypeError);
  });
});
