/**
 * The page's configuration: the JSON block the server renders into index.html
 * (`<script type="application/json" id="cyclone-config">`), read once at start. Without it (the
 * page opened from disk, or a server that did not inject it) the UI assumes the root path and
 * read-only rights until GET /api/meta answers.
 */
import type { UiConfig } from '../../src/shared/api.ts';

const FALLBACK: UiConfig = {
  basePath: '',
  apiBase: '/api',
  readOnly: true,
  version: '',
  user: null,
  can: { retry: false, cancel: false, signal: false, schedules: false },
  refreshMs: 3000,
  hidePayloadsByDefault: false,
};

/** Reads the config block; the fallback when it is missing or not JSON. */
export function readConfig(): UiConfig {
  const el = document.getElementById('cyclone-config');
  if (!el?.textContent) return FALLBACK;
  try {
    const parsed = JSON.parse(el.textContent) as Partial<UiConfig>;
    const basePath = (parsed.basePath ?? '').replace(/\/+$/, '');
    return {
      ...FALLBACK,
      ...parsed,
      basePath,
      apiBase: parsed.apiBase ?? `${basePath}/api`,
      can: { ...FALLBACK.can, ...parsed.can },
    };
  } catch {
    return FALLBACK;
  }
}

/** The configuration of this page load. */
export const config: UiConfig = readConfig();
