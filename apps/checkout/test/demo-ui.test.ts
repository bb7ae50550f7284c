/**
 * `pnpm demo --ui`: after the summary the operator UI is served on loopback, on the demo's
 * database, and its URL printed; it answers the API and its pages until stopped. (The demo itself
 * is run by demo.test.ts; this starts the same `serveUi` on a test database.)
 */
import { Client } from '@cyclone/core';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { parseOptions } from '../src/demo/options.js';
import { serveUi } from '../src/demo/ui.js';
import { createTestDb, type TestDb } from './support/db.js';

let db: TestDb;
let client: Client;

beforeAll(async () => {
  db = await createTestDb();
  client = new Client({ connectionString: db.url, poolSize: 2 });
});

afterAll(async () => {
  await client?.close();
  await db?.drop();
});

it('takes --ui and --ui-port', () => {
  expect((parseOptions([]) as { uiPort?: number }).uiPort).toBeUndefined();
  expect((parseOptions(['--ui']) as { uiPort?: number }).uiPort).toBe(7777);
  expect((parseOptions(['--ui-port', '0']) as { uiPort?: number }).uiPort).toBe(0);
  expect(() => parseOptions(['--ui-port', '70000'])).toThrow(/ui-port/);
});

it('serves the UI on the demo database after the summary, printing its URL', async () => {
  const lines: string[] = [];
  let stop!: () => void;
  const until = new Promise<void>((resolve) => {
    stop = resolve;
  });
  let printed!: (url: string) => void;
  const url = new Promise<string>((resolve) => {
    printed = resolve;
  });
  const served = serveUi(
    client,
    0,
    (line) => {
      lines.push(line);
      const m = /Cyclone UI: (http:\/\/127\.0\.0\.1:\d+\/)/.exec(line);
      if (m?.[1]) printed(m[1]);
    },
    until,
  );
  const base = await url;
  try {
    const overview = await fetch(`${base}api/overview`);
    expect(overview.status).toBe(200);
    expect(await overview.json()).toHaveProperty('runs');
    const page = await fetch(base);
    expect(page.status).toBe(200);
    expect(page.headers.get('content-type')).toMatch(/text\/html/);
  } finally {
    stop();
    await served;
  }
  expect(lines.join('\n')).toMatch(/the demo's database\); Ctrl-C stops it/);
  // Stopped: the port no longer answers.
  await expect(fetch(`${base}api/overview`)).rejects.toThrow();
});
