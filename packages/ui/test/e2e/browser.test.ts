/**
 * The operator pages in headless Chromium (Debian's /usr/bin/chromium through playwright-core),
 * against a real PostgreSQL, a real worker child process and real UI servers, every page under
 * the base path /ops/cyclone. Needs the built pages (`pnpm build`, which CI runs first).
 *
 * Screenshots of every page go to packages/ui/test-artifacts/ (gitignored); docs/ui.md shows a
 * few of them, copied to docs/images/ui/.
 */
import { existsSync, readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { Client } from '@cyclone/core';
import { killAllChildren, spawnWorker, waitFor } from '@cyclone/testkit';
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type AuditEvent, createUi, type Ui, type UiOptions } from '../../src/index.js';
import { createTestDb, type TestDb } from '../support/db.js';
import { launchBrowser, screenshot, type TestBrowser } from './support/browser.js';
import {
  Approval,
  FLOW_TABLES_SQL,
  RefundFlow,
  Report,
  Shop,
  Slow,
  Sync,
  setSwitch,
  shopInput,
} from './support/flows.js';

const BASE = '/ops/cyclone';
const PUBLIC_INDEX = fileURLToPath(new URL('../../dist/public/index.html', import.meta.url));
const RUN_MS = 60_000;
/** How long a page may take to show what it should (a loaded machine, a 1 s polling interval). */
const SHOW_MS = 20_000;

interface Served {
  ui: Ui;
  server: Server;
  origin: string;
  /** The UI's root URL: origin + base path. */
  root: string;
  actions: AuditEvent[];
}

let db: TestDb;
let client: Client;
let browser: TestBrowser;
let main: Served;
let readOnly: Served;
let guarded: Served;
let evil: { server: Server; origin: string };
const pageErrors: string[] = [];

const listen = (server: Server): Promise<string> =>
  new Promise((resolve) => {
    server.listen(0, '127.0.0.1', () => {
      resolve(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
    });
  });

async function serve(options: Omit<UiOptions, 'client'> = {}): Promise<Served> {
  const actions: AuditEvent[] = [];
  const ui = createUi({
    client,
    basePath: BASE,
    refreshMs: 1_000,
    onAction: (e) => {
      actions.push(e);
    },
    ...options,
  });
  const server = createServer(ui.nodeHandler);
  const origin = await listen(server);
  return { ui, server, origin, root: `${origin}${BASE}`, actions };
}

const close = (server: Server) => new Promise<void>((r) => server.close(() => r()));

/** A page that records uncaught errors of the SPA (checked at the end). */
async function newPage(): Promise<Page> {
  const page = await browser.newPage();
  page.on('pageerror', (err) => pageErrors.push(`${page.url()}: ${err.message}`));
  return page;
}

const runState = async (runId: string) => (await client.getRun(runId)).state;

/** Submits a Shop run and waits for it to finish. */
async function finishedShop(n: number, key?: string): Promise<string> {
  const { runId } = key
    ? await client.submitOnce(Shop, key, shopInput(n))
    : await client.submit(Shop, shopInput(n));
  await client.waitForRun(runId, { timeoutMs: RUN_MS });
  return runId;
}

/** Submits a Sync run failing by the switch `name` (turned on first) and waits for it to fail. */
async function failedSync(name: string): Promise<string> {
  await setSwitch(db.pool, name, true);
  const { runId } = await client.submit(Sync, { switch: name });
  await client.waitForRun(runId, { timeoutMs: RUN_MS });
  expect(await runState(runId)).toBe('failed');
  return runId;
}

let failedShopId: string;
let order42Id: string;
let reportId: string;
let approvalId: string;

describe(`the operator pages in Chromium under ${BASE}`, { timeout: 120_000 }, () => {
  beforeAll(async () => {
    if (!existsSync(PUBLIC_INDEX)) {
      throw new Error(`${PUBLIC_INDEX} is missing: run \`pnpm build\` first (CI does)`);
    }
    db = await createTestDb();
    await db.pool.query(FLOW_TABLES_SQL);
    client = new Client({ connectionString: db.url, poolSize: 4 });
    await spawnWorker({
      script: new URL('./support/ui-worker.ts', import.meta.url),
      env: { DATABASE_URL: db.url },
      readyTimeoutMs: 60_000,
    });
    [main, readOnly, browser] = await Promise.all([
      serve(),
      serve({ readOnly: true }),
      launchBrowser(),
    ]);
    guarded = await serve({
      authorize: (req) => {
        const auth = req.headers.get('authorization');
        if (!auth) return { refuse: 401, challenge: 'Bearer realm="cyclone"' };
        if (auth === 'Bearer viewer-revoked') return { refuse: 403, message: 'access revoked' };
        if (auth === 'Bearer reader') {
          return { user: 'reader', can: { retry: false, cancel: false, signal: false } };
        }
        return { refuse: 403 };
      },
    });
    // Another origin (another port) serving a page that forges requests to the UI.
    evil = await (async () => {
      const server = createServer((req, res) => {
        const target = new URL(req.url ?? '/', 'http://x').searchParams.get('target') ?? '';
        res.setHeader('content-type', 'text/html');
        res.end(
          `<!doctype html><form id="f" method="POST" action="${target}">` +
            `<input name="all" value="true"></form>`,
        );
      });
      return { server, origin: await listen(server) };
    })();

    // Finished orders, one of them with a submit key.
    for (let i = 1; i <= 4; i++) await finishedShop(i);
    order42Id = await finishedShop(42, 'order-42');
    // An order whose charge fails after the provider call: discarded after 2 attempts.
    await setSwitch(db.pool, 'charge-fails', true);
    failedShopId = await finishedShop(7);
    await setSwitch(db.pool, 'charge-fails', false);
    expect(await runState(failedShopId)).toBe('failed');
    // A 5 MB output, a call with an unknown outcome, a run waiting for a signal.
    reportId = (await client.submit(Report, { mb: 5 })).runId;
    await client.waitForRun(reportId, { timeoutMs: RUN_MS });
    expect(await runState(reportId)).toBe('completed');
    await client.submit(RefundFlow, {});
    approvalId = (await client.submit(Approval, {})).runId;
  }, 300_000);

  afterAll(async () => {
    await browser?.close();
    for (const s of [main, readOnly, guarded]) {
      if (!s) continue;
      await close(s.server);
      await s.ui.close();
    }
    if (evil) await close(evil.server);
    await killAllChildren();
    await client?.close();
    await db?.drop();
  }, 60_000);

  it('lists runs and filters them by state and workflow', async () => {
    const page = await newPage();
    await page.goto(`${main.root}/runs`);
    const rows = page.locator('[data-testid=runs-table] tbody tr');
    await expect.poll(() => rows.count(), { timeout: SHOW_MS }).toBeGreaterThanOrEqual(7);
    await screenshot(page, 'runs');

    await page.selectOption('[data-testid=filter-state]', 'failed');
    await page.waitForURL(/state=failed/);
    await expect
      .poll(async () => [
        ...new Set(await rows.evaluateAll((trs) => trs.map((tr) => tr.dataset.state))),
      ])
      .toEqual(['failed']);
    await expect
      .poll(() => page.locator(`tr[data-run-id="${failedShopId}"]`).count(), { timeout: SHOW_MS })
      .toBe(1);

    await page.selectOption('[data-testid=filter-state]', '');
    await page.selectOption('[data-testid=filter-workflow]', 'report');
    await page.waitForURL(/workflow=report/);
    await expect.poll(() => rows.count(), { timeout: SHOW_MS }).toBe(1);
    await expect(rows.first().getAttribute('data-run-id')).resolves.toBe(reportId);
    await page.close();
  });

  it('goes to a run by its id, by its submit key and by an idempotency key', async () => {
    const page = await newPage();
    await page.goto(`${main.root}/`);
    await page.fill('[data-testid=goto]', failedShopId);
    await page.press('[data-testid=goto]', 'Enter');
    await page.waitForURL(`${main.root}/runs/${failedShopId}`);
    await expect(page.locator('[data-testid=run-state]').getAttribute('data-state')).resolves.toBe(
      'failed',
    );

    await page.fill('[data-testid=goto]', 'order-42');
    await page.press('[data-testid=goto]', 'Enter');
    await page.waitForURL(`${main.root}/runs/${order42Id}`);

    await page.fill('[data-testid=goto]', `${order42Id}:charge`);
    await page.press('[data-testid=goto]', 'Enter');
    await page.waitForURL(`${main.root}/runs/${order42Id}/nodes/charge`);
    await page.locator('[data-testid=node-panel]').waitFor();

    await page.fill('[data-testid=goto]', 'no-such-key');
    await page.press('[data-testid=goto]', 'Enter');
    await expect(page.locator('[data-testid=goto-message]').textContent()).resolves.toContain(
      'Nothing found',
    );
    await page.close();
  });

  it("draws a run's DAG with each node's state", async () => {
    const page = await newPage();
    await page.goto(`${main.root}/runs/${failedShopId}`);
    await page.locator('[data-testid=dag]').waitFor();
    const expected: Record<string, string> = {
      reserve: 'completed',
      charge: 'discarded',
      email: 'cancelled',
      ship: 'cancelled',
      done: 'cancelled',
    };
    const run = await client.getRun(failedShopId);
    // What the engine says each node is, so the test does not guess cancellation semantics.
    for (const s of run.steps) expected[s.node] = s.state;
    for (const [node, state] of Object.entries(expected)) {
      const card = page.locator(`[data-testid="dag-node-${node}"]`);
      await card.waitFor();
      await expect(card.getAttribute('data-state')).resolves.toBe(state);
    }
    await expect(
      page.locator('[data-testid="dag-node-charge"] [data-testid=attempts]').textContent(),
    ).resolves.toBe('2/2');
    await screenshot(page, 'run-dag');

    await page.click('[data-testid=view-list]');
    const listed = await page
      .locator('[data-testid=step-list] tbody tr')
      .evaluateAll((trs) =>
        Object.fromEntries(trs.map((tr) => [tr.dataset.node, tr.dataset.state])),
      );
    expect(listed).toEqual(expected);
    await page.close();
  });

  it('retries a discarded node from its panel, and the run completes without a second charge', async () => {
    const page = await newPage();
    await page.goto(`${main.root}/runs/${failedShopId}`);
    await page.click('[data-testid="dag-node-charge"]');
    await page.waitForURL(`${main.root}/runs/${failedShopId}/nodes/charge`);
    const panel = page.locator('[data-testid=node-panel]');
    // Two failed attempts, stacks folded.
    await expect
      .poll(() => panel.locator('[data-testid=errors] > li').count(), { timeout: SHOW_MS })
      .toBe(2);
    await expect(panel.locator('[data-testid=errors]').textContent()).resolves.toContain(
      'fraud check service answered 503',
    );
    await expect(panel.locator('.stack').first().isVisible()).resolves.toBe(false);
    // The provider call is in the ledger as succeeded, once.
    const ledgerRow = panel.locator('[data-testid=ledger-row]');
    await expect.poll(() => ledgerRow.count(), { timeout: SHOW_MS }).toBe(1);
    await expect(ledgerRow.getAttribute('data-phase')).resolves.toBe('succeeded');
    await expect(ledgerRow.textContent()).resolves.toContain('fakepay');
    // What the provider answered, stored with the entry (replayed on the retry below).
    await panel.locator('.ledger-answer summary').click();
    await expect(panel.locator('[data-testid=payload-result]').textContent()).resolves.toContain(
      '"ch_',
    );
    await screenshot(page, 'node-panel-failed');

    await panel.locator('[data-testid=retry-node]').click();
    const dialog = page.locator('dialog[open]');
    await expect(dialog.locator('[data-testid=retry-notice]').textContent()).resolves.toContain(
      'will not be repeated',
    );
    await dialog.locator('[data-testid=confirm]').click();

    await expect
      .poll(() => page.locator('[data-testid=run-state]').getAttribute('data-state'), {
        timeout: RUN_MS,
      })
      .toBe('completed');
    expect(await runState(failedShopId)).toBe('completed');
    // The charge was replayed from the ledger: the provider saw one request under the key.
    const charges = await db.pool.query<{ calls: number }>(
      'SELECT calls FROM ui_fake_charges WHERE key = $1',
      [`${failedShopId}:charge`],
    );
    expect(charges.rows).toEqual([{ calls: 1 }]);
    expect(main.actions.map((a) => a.action)).toContain('retry');

    // The panel now has the output too, with the errors kept.
    await expect
      .poll(() => panel.getAttribute('aria-label'), { timeout: SHOW_MS })
      .toBe('Node charge');
    await expect
      .poll(() => panel.locator('[data-testid=payload-output]').textContent(), { timeout: 20_000 })
      .toContain('chargeId');
    await expect(panel.locator('[data-testid=errors] > li').count()).resolves.toBe(2);
    await screenshot(page, 'node-panel');
    await page.close();
  });

  it('cancels a running run', async () => {
    const { runId } = await client.submit(Slow, {});
    await waitFor('the slow step to run', async () => {
      const run = await client.getRun(runId);
      return run.steps.some((s) => s.state === 'running');
    });
    const page = await newPage();
    await page.goto(`${main.root}/runs/${runId}`);
    await page.click('[data-testid=cancel-run]');
    const dialog = page.locator('dialog[open]');
    // A cancel repeats no provider call: the retry's sentence about them is not its to say.
    await expect(dialog.locator('[data-testid=retry-notice]').count()).resolves.toBe(0);
    await dialog.locator('[data-testid=confirm]').click();
    await expect
      .poll(() => page.locator('[data-testid=run-state]').getAttribute('data-state'), {
        timeout: RUN_MS,
      })
      .toBe('cancelled');
    expect(await runState(runId)).toBe('cancelled');
    // The page says what the action did, in the server's words.
    await expect(page.locator('[data-testid=action-notice]').textContent()).resolves.toBe(
      `Run ${runId} cancelled: its unfinished nodes are cancelled, and running handlers are told to stop.`,
    );
    await page.close();
  });

  it('retries the selected failed runs in bulk', async () => {
    const ids = [await failedSync('bulk'), await failedSync('bulk'), await failedSync('bulk')];
    await setSwitch(db.pool, 'bulk', false);
    const page = await newPage();
    await page.goto(`${main.root}/runs?workflow=sync&state=failed`);
    const rows = page.locator('[data-testid=runs-table] tbody tr');
    await expect.poll(() => rows.count(), { timeout: SHOW_MS }).toBe(3);
    await page.check('[data-testid=select-all]');
    await expect(
      page.locator('[data-testid=bulk-retry-selected]').textContent(),
    ).resolves.toContain('(3)');
    await screenshot(page, 'runs-bulk');
    await page.click('[data-testid=bulk-retry-selected]');
    const dialog = page.locator('dialog[open]');
    await expect(dialog.textContent()).resolves.toContain('3 selected runs');
    await dialog.locator('[data-testid=confirm]').click();
    await dialog.locator('[data-testid=bulk-progress][data-done=true]').waitFor();
    await expect(dialog.locator('[data-testid=bulk-progress]').textContent()).resolves.toContain(
      '3 changed',
    );
    for (const id of ids) {
      await client.waitForRun(id, { timeoutMs: RUN_MS });
      expect(await runState(id)).toBe('completed');
    }
    await page.close();
  });

  it('cancels every run a filter matches, with the count confirmed and progress shown', async () => {
    const ids = [(await client.submit(Slow, {})).runId, (await client.submit(Slow, {})).runId];
    const page = await newPage();
    await page.goto(`${main.root}/runs?workflow=slow&state=running`);
    const rows = page.locator('[data-testid=runs-table] tbody tr');
    await expect.poll(() => rows.count(), { timeout: SHOW_MS }).toBe(2);
    await page.click('[data-testid=bulk-cancel-filter]');
    const dialog = page.locator('dialog[open]');
    await expect(dialog.textContent()).resolves.toContain('the 2 runs matching the filter');
    await expect(dialog.textContent()).resolves.toContain('"workflow":"slow"');
    await dialog.locator('[data-testid=confirm]').click();
    await dialog.locator('[data-testid=bulk-progress][data-done=true]').waitFor();
    await expect(dialog.locator('[data-testid=bulk-progress]').textContent()).resolves.toContain(
      '2 changed',
    );
    for (const id of ids) {
      await client.waitForRun(id, { timeoutMs: RUN_MS });
      expect(await runState(id)).toBe('cancelled');
    }
    await page.close();
  });

  it('offers no action in read-only mode, and the server refuses a forged POST with 403', async () => {
    const runId = await failedSync('read-only');
    const page = await newPage();
    // The same run on the read-write UI offers the retry (so its absence below means something).
    await page.goto(`${main.root}/runs/${runId}`);
    await page.locator('[data-testid=retry-all]').waitFor();

    await page.goto(`${readOnly.root}/runs/${runId}/nodes/push`);
    await page.locator('[data-testid=read-only]').waitFor();
    await page.locator('[data-testid=node-panel] [data-testid=errors]').waitFor();
    await expect(page.locator('[data-testid=retry-all]').count()).resolves.toBe(0);
    await expect(page.locator('[data-testid=cancel-run]').count()).resolves.toBe(0);
    await expect(page.locator('[data-testid=retry-node]').count()).resolves.toBe(0);
    await screenshot(page, 'read-only-run');
    await page.goto(`${readOnly.root}/runs`);
    await page.locator('[data-testid=runs-table]').waitFor();
    await expect(page.locator('[data-testid=bulkbar]').count()).resolves.toBe(0);

    const forged = await page.evaluate(
      async ([api, id]) => {
        const res = await fetch(`${api}/runs/${id}/retry`, {
          method: 'POST',
          headers: { 'Content-Type': 'application/json', 'X-Cyclone-UI': '1' },
          body: JSON.stringify({ all: true }),
        });
        return { status: res.status, body: (await res.json()) as { error: string } };
      },
      [`${BASE}/api`, runId] as const,
    );
    expect(forged.status).toBe(403);
    expect(forged.body.error).toBe('read_only');
    expect(await runState(runId)).toBe('failed');
    expect(readOnly.actions).toEqual([]);
    await page.close();
  });

  it('shows what the authorize hook refuses: 401 without credentials, 403 when refused', async () => {
    const runId = await failedSync('guarded');
    const page = await newPage();
    const anonymous = await page.goto(`${guarded.root}/runs/${runId}`);
    expect(anonymous?.status()).toBe(401);
    expect(anonymous?.headers()['www-authenticate']).toContain('Bearer');

    await page.setExtraHTTPHeaders({ Authorization: 'Bearer viewer-revoked' });
    const revoked = await page.goto(`${guarded.root}/runs/${runId}`);
    expect(revoked?.status()).toBe(403);
    await page.close();

    // A user the hook lets read but not act: the page offers nothing, the server refuses.
    const reader = await newPage();
    await reader.setExtraHTTPHeaders({ Authorization: 'Bearer reader' });
    const ok = await reader.goto(`${guarded.root}/runs/${runId}`);
    expect(ok?.status()).toBe(200);
    await reader.locator('[data-testid=run-state]').waitFor();
    await expect(reader.locator('.user').textContent()).resolves.toBe('reader');
    await expect(reader.locator('[data-testid=retry-all]').count()).resolves.toBe(0);
    const forged = await reader.evaluate(
      async ([api, id]) => {
        const res = await fetch(`${api}/runs/${id}/retry`, {
          method: 'POST',
          headers: { 'Content-Type': 'application/json', 'X-Cyclone-UI': '1' },
          body: JSON.stringify({ all: true }),
        });
        return { status: res.status, body: (await res.json()) as { error: string } };
      },
      [`${BASE}/api`, runId] as const,
    );
    expect(forged.status).toBe(403);
    expect(forged.body.error).toBe('forbidden');
    expect(await runState(runId)).toBe('failed');
    await reader.close();
  });

  it('refuses a forged cross-origin POST', async () => {
    const runId = await failedSync('csrf');
    const page = await newPage();
    const target = `${main.root}/api/runs/${runId}/retry`;
    await page.goto(`${evil.origin}/?target=${encodeURIComponent(target)}`);
    // A cross-site form post (no custom header, a form content type): refused.
    const [answer] = await Promise.all([
      page.waitForNavigation(),
      page.locator('#f').evaluate((f) => (f as unknown as { submit: () => void }).submit()),
    ]);
    expect([403, 415]).toContain(answer?.status());
    // A cross-site fetch that tries to look like the UI: the preflight fails in the browser.
    await page.goto(`${evil.origin}/`);
    const fetched = await page.evaluate(async (url) => {
      try {
        const res = await fetch(url, {
          method: 'POST',
          headers: { 'Content-Type': 'application/json', 'X-Cyclone-UI': '1' },
          body: JSON.stringify({ all: true }),
        });
        return `answered ${res.status}`;
      } catch (err) {
        return `blocked: ${String(err)}`;
      }
    }, target);
    expect(fetched).toMatch(/^blocked/);
    // A "simple" cross-site request (text/plain, no preflight): sent, and refused by the server.
    await page.evaluate(async (url) => {
      await fetch(url, { method: 'POST', mode: 'no-cors', body: '{"all":true}' }).catch(() => {});
    }, target);
    // The same forgery from outside a browser, with a foreign Origin: 403.
    const outside = await fetch(target, {
      method: 'POST',
      headers: {
        'Content-Type': 'application/json',
        'X-Cyclone-UI': '1',
        Origin: 'https://evil.example',
      },
      body: JSON.stringify({ all: true }),
    });
    expect(outside.status).toBe(403);
    expect(((await outside.json()) as { error: string }).error).toBe('csrf');
    expect(await runState(runId)).toBe('failed');
    expect(main.actions.filter((a) => JSON.stringify(a).includes(runId))).toEqual([]);
    await page.close();
  });

  it('shows a 5 MB output as a preview with a download, without loading it into the page', async () => {
    const page = await newPage();
    await page.goto(`${main.root}/runs/${reportId}/nodes/export`);
    const panel = page.locator('[data-testid=node-panel]');
    const preview = panel.locator('[data-testid=payload-output] pre[data-truncated=true]');
    await preview.waitFor();
    const shown = await preview.evaluate((el) => el.textContent?.length ?? 0);
    expect(shown).toBeGreaterThan(1_000);
    expect(shown).toBeLessThan(200_000);
    // The size of the whole (JSON text as PostgreSQL prints it), said next to the preview.
    await expect(panel.locator('[data-testid=payload-output]').textContent()).resolves.toMatch(
      /[5-9]\.\d MB — preview/,
    );
    // The whole page holds far less than the output.
    const domText = await page.locator('body').evaluate((el) => el.textContent?.length ?? 0);
    expect(domText).toBeLessThan(500_000);
    // The download link serves all of it.
    const href = await panel.locator('[data-testid=download-output]').getAttribute('href');
    expect(href).toBeTruthy();
    const size = await page.evaluate(
      async (url) => (await (await fetch(url)).text()).length,
      href as string,
    );
    expect(size).toBeGreaterThan(5 * 1024 * 1024);
    // Still interactive: another node's panel opens.
    await page.click('[data-testid=view-list]');
    await page.locator('[data-testid=step-list]').waitFor();
    await screenshot(page, 'node-panel-large-output');
    await page.close();
  });

  it('follows a dark system theme, the setting overrides it, and times show as chosen', async () => {
    const page = await newPage();
    await page.emulateMedia({ colorScheme: 'dark' });
    await page.goto(`${main.root}/`);
    await expect
      .poll(() => page.locator('html').getAttribute('data-theme'), { timeout: SHOW_MS })
      .toBe('dark');
    const bg = await page
      .locator('body')
      .evaluate((el) => el.ownerDocument.defaultView?.getComputedStyle(el).backgroundColor);
    expect(bg).toBe('rgb(17, 21, 28)');
    await page.locator('[data-testid=stat-running]').waitFor();
    await screenshot(page, 'overview-dark');
    await page.goto(`${main.root}/runs/${failedShopId}`);
    await page.locator('[data-testid=dag]').waitFor();
    await page.locator('[data-testid="dag-node-done"]').waitFor();
    await screenshot(page, 'run-dag-dark');

    await page.goto(`${main.root}/settings`);
    await page.check('[data-testid=theme-light]');
    await expect
      .poll(() => page.locator('html').getAttribute('data-theme'), { timeout: SHOW_MS })
      .toBe('light');
    await page.check('[data-testid=theme-system]');
    await expect
      .poll(() => page.locator('html').getAttribute('data-theme'), { timeout: SHOW_MS })
      .toBe('dark');
    // Times: relative, then UTC (kept in the browser across pages).
    await page.check('[data-testid=times-relative]');
    await page.goto(`${main.root}/runs`);
    const firstTime = page.locator('[data-testid=runs-table] tbody tr time').first();
    await expect.poll(() => firstTime.textContent(), { timeout: SHOW_MS }).toMatch(/ago|now/);
    await page.goto(`${main.root}/settings`);
    await page.check('[data-testid=times-utc]');
    await page.goto(`${main.root}/runs`);
    await expect
      .poll(() => firstTime.textContent(), { timeout: SHOW_MS })
      .toMatch(/^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$/);
    await page.goto(`${main.root}/settings`);
    await page.check('[data-testid=times-local]');
    await page.close();
  });

  it('stops polling while paused by the button and while the tab is hidden', async () => {
    const page = await newPage();
    let polls = 0;
    page.on('request', (req) => {
      if (req.url().endsWith('/api/overview')) polls++;
    });
    await page.goto(`${main.root}/`);
    // The UI polls every second here (refreshMs 1,000).
    await expect.poll(() => polls, { timeout: 20_000 }).toBeGreaterThanOrEqual(3);
    await page.click('[data-testid=pause]');
    await expect(page.locator('[data-testid=pause]').getAttribute('aria-pressed')).resolves.toBe(
      'true',
    );
    // A poll that started just before the click may still be counted: settle first.
    await new Promise((r) => setTimeout(r, 1_000));
    const paused = polls;
    await new Promise((r) => setTimeout(r, 4_000));
    expect(polls).toBe(paused);
    await page.click('[data-testid=pause]');
    await expect.poll(() => polls, { timeout: 20_000 }).toBeGreaterThan(paused);

    // A hidden tab (what the browser says when the operator switches tabs) does not poll either.
    await page.evaluate(() => {
      const doc = globalThis as unknown as {
        document: { dispatchEvent: (e: Event) => void };
      };
      Object.defineProperty(doc.document, 'visibilityState', {
        value: 'hidden',
        configurable: true,
      });
      doc.document.dispatchEvent(new Event('visibilitychange'));
    });
    await new Promise((r) => setTimeout(r, 1_500));
    const hidden = polls;
    await new Promise((r) => setTimeout(r, 4_000));
    expect(polls).toBe(hidden);
    await page.close();
  });

  it('shows the signal a wait node waits for on its card and in its panel', async () => {
    const page = await newPage();
    await page.goto(`${main.root}/runs/${approvalId}/nodes/approve`);
    const card = page.locator('[data-testid="dag-node-approve"]');
    await card.waitFor();
    await expect(card.locator('.dag-node-title').textContent()).resolves.toContain(
      'signal approved',
    );
    await expect(card.locator('[data-testid=wait-for]').textContent()).resolves.toBe(
      'waiting for approved',
    );
    // The panel names the signal and when the wait times out (timeoutMs: an hour).
    const panel = page.locator('[data-testid=panel-wait-for]');
    await panel.waitFor();
    await expect(panel.textContent()).resolves.toMatch(/^approved · times out at /);
    await screenshot(page, 'run-wait-node');
    await page.close();
  });

  it('sends a signal from the signals page', async () => {
    const page = await newPage();
    // A name no node waits for is stored, and the answer says so.
    await page.goto(`${main.root}/signals?run=${approvalId}`);
    await page.fill('[data-testid=signal-name]', 'approvd');
    await page.click('[data-testid=signal-send]');
    const result = page.locator('[data-testid=signal-result]');
    await expect(result.textContent()).resolves.toBe(
      `Signal “approvd” sent to run ${approvalId}. No node of this run waits for “approvd” (a misspelt name, or its wait node has finished); it is stored anyway. Open the run`,
    );
    await expect(result.getAttribute('data-unheard')).resolves.toBe('true');
    await page.goto(`${main.root}/signals?run=${approvalId}`);
    await page.fill('[data-testid=signal-name]', 'approved');
    await page.fill('[data-testid=signal-payload]', '{ "by": "alice" }');
    await screenshot(page, 'signals');
    await page.click('[data-testid=signal-send]');
    // The result of this send, not the one above (the same element, new text).
    await expect
      .poll(() => result.textContent(), { timeout: SHOW_MS })
      .toBe(
        `Signal “approved” sent to run ${approvalId}: node approve completes with its payload. Open the run`,
      );
    await expect(result.getAttribute('data-unheard')).resolves.toBe('false');
    await expect(result.textContent()).resolves.not.toContain('idempotency');
    await client.waitForRun(approvalId, { timeoutMs: RUN_MS });
    expect(await runState(approvalId)).toBe('completed');
    await page.close();
  });

  it('lists an idle action whose only limit has a key, under readable headings', async () => {
    // Nothing of the notify workflow ever runs: its keyed limit has no key in use.
    const page = await newPage();
    await page.goto(`${main.root}/limits`);
    const keyed = page.locator('[data-testid=limits-table] tr[data-action="notify-customer"]');
    await keyed.first().waitFor({ timeout: SHOW_MS });
    const headings = await page.locator('[data-testid=limits-table] th').allTextContents();
    expect(headings).toEqual([
      'Action',
      'Limit type',
      'Key',
      'Limit',
      'Period',
      'In use',
      'Waiting',
    ]);
    const cells = (row: typeof keyed) => row.locator('td').allTextContents();
    expect(await cells(keyed)).toEqual([
      'notify-customer',
      'Concurrency',
      'no key in use',
      '1',
      '—',
      '0',
      '0',
    ]);
    const sms = page.locator('[data-testid=limits-table] tr[data-action="send-sms"]');
    expect(await cells(sms)).toEqual(['send-sms', 'Rate', 'whole action', '5', '1.0 s', '0', '0']);
    await screenshot(page, 'limits-idle');
    await page.close();
  });

  it('renders every page under the base path (screenshots kept as artefacts)', async () => {
    const page = await newPage();
    const pages: [string, string, string][] = [
      ['overview', '/', '[data-testid=stat-running] .stat-value'],
      ['unknown-outcomes', '/unknown', '[data-testid=unknown-table]'],
      ['workers', '/workers', '[data-testid=workers-table]'],
      ['schedules', '/schedules', '[data-testid=schedules-table]'],
      ['limits', '/limits', '[data-testid=page-limits]'],
      ['settings', '/settings', '[data-testid=page-settings]'],
      ['run', `/runs/${order42Id}`, '[data-testid="dag-node-done"]'],
    ];
    for (const [name, path, ready] of pages) {
      const res = await page.goto(`${main.root}${path}`);
      expect(res?.status(), path).toBe(200);
      await page.locator(ready).first().waitFor({ timeout: 30_000 });
      if (name === 'overview') {
        await expect
          .poll(() => page.locator('[data-testid=stat-running] .stat-value').textContent())
          .not.toBe('—');
      }
      await screenshot(page, name);
    }
    // Every asset came from under the base path.
    const html = readFileSync(PUBLIC_INDEX, 'utf8');
    expect(html).toMatch(/src="\.\/assets\//);
    expect(pageErrors).toEqual([]);
    await page.close();
  });
});
