/**
 * The UI tests' fixture: a cloned database, a client, an in-process worker running the test
 * workflows, and a UI served by node:http on an ephemeral loopback port under a base path.
 *
 * Workflows:
 * - `charge` (a → b → c): `a` records one provider call in the idempotency ledger (`once`) and
 *   returns a secret-looking token; `b` refuses (NonRetryableError) until its run is healed, so
 *   the run fails with `b` discarded; `c` completes.
 * - `big`: one node whose output is a string of `BIG_OUTPUT_CHARS` characters (5 MB).
 * - `parked`: never claimed (no worker runs it), so its runs stay `running`, for lists and cancel.
 * - `approval`: a wait node for the signal `approved`, then `done`.
 * - `tick`: one node; the schedule `nightly` (03:00 UTC, never due during a test) runs it.
 * - `throttled`: one node whose action has a concurrency limit of 2.
 */

import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import {
  Client,
  NonRetryableError,
  newAction,
  newSchedule,
  newWorkflow,
  silentLogger,
  Worker,
} from '@cyclone/core';
import { once } from '@cyclone/idempotency';
import { createUi, type Ui, type UiOptions } from '../../src/index.js';
import { UI_HEADER, UI_HEADER_VALUE } from '../../src/shared/api.js';
import { createTestDb, type TestDb } from './db.js';

/** The base path every test serves the UI under. */
export const BASE = '/ops/cyclone';
/** Characters of the `big` workflow's output string (its JSON text is 2 bytes more). */
export const BIG_OUTPUT_CHARS = 5 * 1024 * 1024;

/** Runs whose `b` node succeeds. */
export const healed = new Set<string>();

const charge = newAction('charge', async (ctx) =>
  once(ctx, { request: { amount: 100 }, provider: 'fake-pay', operation: 'charge' }, async () => ({
    chargeId: `ch_${ctx.runId.slice(0, 8)}`,
    token: 'tok_live_secret',
  })),
);
const refuses = newAction('refuses', async (ctx) => {
  if (!healed.has(ctx.runId)) throw new NonRetryableError('card declined for ada@example.com');
  return { healed: true };
});
const ok = newAction('ok', async (ctx) => ({ node: ctx.node }));
const bigOutput = newAction('bigOutput', async () => ({ blob: 'x'.repeat(BIG_OUTPUT_CHARS) }));

export const Charge = newWorkflow('charge', {
  nodes: {
    a: { action: charge },
    b: { action: refuses, after: ['a'] },
    c: { action: ok, after: ['b'] },
  },
});
export const Big = newWorkflow('big', { nodes: { blob: { action: bigOutput } } });
export const Parked = newWorkflow('parked', { nodes: { p: { action: ok } } });
export const Approval = newWorkflow('approval', {
  nodes: { approve: { waitFor: 'approved' }, done: { action: ok, after: ['approve'] } },
});
export const Tick = newWorkflow('tick', { nodes: { t: { action: ok } } });
/** An action with a concurrency limit, so that the workers record one (`GET /api/limits`). */
const throttled = newAction('throttled', async () => ({ ok: true }), {
  concurrency: { limit: 2 },
});
export const Throttled = newWorkflow('throttled', { nodes: { t: { action: throttled } } });
export const Nightly = newSchedule('nightly', {
  cron: '0 3 * * *',
  workflow: Tick,
  input: () => ({}),
});

/** A running fixture; `stop` ends everything it started. */
export interface Fixture {
  db: TestDb;
  client: Client;
  worker: Worker;
  /** The UI's origin, e.g. `http://127.0.0.1:41234`. */
  origin: string;
  /** `origin + BASE`. */
  url: string;
  ui: Ui;
  /** Another UI on the same client, served on its own port (`serve(options)`). */
  serve(options: Partial<UiOptions>): Promise<{ ui: Ui; url: string; origin: string }>;
  stop(): Promise<void>;
}

/** Starts the fixture; `options` go to the main UI's `createUi`. */
export async function startFixture(options: Partial<UiOptions> = {}): Promise<Fixture> {
  const db = await createTestDb();
  const client = new Client({
    connectionString: db.url,
    poolSize: 4,
    maxPayloadBytes: 8 * 1024 * 1024,
    logger: silentLogger,
  });
  const worker = new Worker({
    client,
    workflows: [Charge, Big, Approval, Tick, Throttled],
    schedules: [Nightly],
    concurrency: 4,
    poolSize: 6,
    pollIntervalMs: 50,
  });
  await worker.start();
  const servers: Server[] = [];
  const uis: Ui[] = [];
  const serve = async (o: Partial<UiOptions>) => {
    const ui = createUi({ client, basePath: BASE, logger: silentLogger, ...o });
    uis.push(ui);
    const server = createServer(ui.nodeHandler);
    servers.push(server);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    return { ui, origin, url: `${origin}${BASE}` };
  };
  const main = await serve(options);
  return {
    db,
    client,
    worker,
    ...main,
    serve,
    async stop() {
      for (const s of servers) s.closeAllConnections();
      await Promise.all(servers.map((s) => new Promise((r) => s.close(r))));
      await Promise.all(uis.map((u) => u.close()));
      await worker.stop({ graceMs: 1000 });
      await client.close();
      await db.drop();
    },
  };
}

/** Headers a same-origin page sends with an action. */
export function actionHeaders(origin: string): Record<string, string> {
  return {
    'content-type': 'application/json',
    [UI_HEADER]: UI_HEADER_VALUE,
    origin,
    'sec-fetch-site': 'same-origin',
  };
}

/** GET `url + path` and its JSON body. */
export async function getJson<T = Record<string, unknown>>(
  url: string,
  path: string,
  headers: Record<string, string> = {},
): Promise<{ status: number; body: T; headers: Headers }> {
  const res = await fetch(`${url}${path}`, { headers });
  return { status: res.status, body: (await res.json()) as T, headers: res.headers };
}

/** POST JSON `body` to `url + path` as the page would (same origin, custom header). */
export async function postJson<T = Record<string, unknown>>(
  origin: string,
  url: string,
  path: string,
  body: unknown,
  headers: Record<string, string> = {},
): Promise<{ status: number; body: T }> {
  const res = await fetch(`${url}${path}`, {
    method: 'POST',
    headers: { ...actionHeaders(origin), ...headers },
    body: JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as T };
}
