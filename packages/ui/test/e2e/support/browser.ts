/**
 * Headless Chromium for the browser tests: Debian's /usr/bin/chromium (`.ci/run` installs the
 * `chromium` package when it is missing) driven by playwright-core, which downloads no browser.
 * A fresh profile directory per launch; the flags keep Chromium from dialling out (background
 * networking, component updates, sync), which a closed network would refuse.
 */
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type BrowserContext, chromium, type Page } from 'playwright-core';

/** Where Debian's chromium package puts the browser. */
export const CHROMIUM = process.env.CYCLONE_CHROMIUM ?? '/usr/bin/chromium';

/** The flags every launch gets (playwright adds `--headless` for `headless: true`). */
export const CHROMIUM_ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

/** Screenshots of the pages, kept as test artefacts (gitignored). */
export const ARTIFACTS = fileURLToPath(new URL('../../../test-artifacts/', import.meta.url));

/** A browser with its own fresh profile; `close()` removes the profile. */
export interface TestBrowser {
  context: BrowserContext;
  newPage: () => Promise<Page>;
  close: () => Promise<void>;
}

/**
 * Launches Chromium with a fresh `--user-data-dir` (playwright's persistent context takes the
 * profile directory as its argument).
 * @throws when /usr/bin/chromium is missing, saying how to install it.
 */
export async function launchBrowser(): Promise<TestBrowser> {
  if (!existsSync(CHROMIUM)) {
    throw new Error(`${CHROMIUM} is missing: apt-get install -y chromium (.ci/run does it)`);
  }
  const profile = mkdtempSync(join(tmpdir(), 'cyclone-ui-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: CHROMIUM_ARGS,
    viewport: { width: 1400, height: 900 },
    timezoneId: 'UTC',
    locale: 'en-GB',
    acceptDownloads: true,
  });
  context.setDefaultTimeout(30_000);
  context.setDefaultNavigationTimeout(30_000);
  return {
    context,
    newPage: () => context.newPage(),
    close: async () => {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}

/** Saves a full-page screenshot `name`.png into the artefacts folder; returns its path. */
export async function screenshot(page: Page, name: string): Promise<string> {
  mkdirSync(ARTIFACTS, { recursive: true });
  const path = join(ARTIFACTS, `${name}.png`);
  // From the top: a scrolled page would show its sticky top bar in the middle of the picture.
  await page.locator('body').evaluate((body) => body.ownerDocument.defaultView?.scrollTo(0, 0));
  await page.screenshot({ path, fullPage: true });
  return path;
}
