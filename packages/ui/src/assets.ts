/**
 * The built pages (packages/ui/dist/public, made by Vite with relative asset URLs): found once,
 * served from a list of the files that exist (so no request path can reach outside the folder),
 * and index.html rendered per request with the runtime base path and the page's config.
 */
import { existsSync } from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';
import { extname, join, relative, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { UiConfig } from './shared/api.js';

/** Content types of the files a Vite build makes. */
const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.json': 'application/json',
  '.map': 'application/json',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.webp': 'image/webp',
  '.woff2': 'font/woff2',
  '.woff': 'font/woff',
  '.txt': 'text/plain; charset=utf-8',
  '.webmanifest': 'application/manifest+json',
};

/**
 * Where the built pages are: `assetsDir` when given, else `public/` beside the compiled server
 * (dist/public from dist/index.js), else the package's dist/public (running from src/, as the
 * tests do). Undefined when none has an index.html.
 */
export function findPublicDir(assetsDir?: string): string | undefined {
  const candidates = assetsDir
    ? [assetsDir]
    : [
        fileURLToPath(new URL('./public', import.meta.url)),
        fileURLToPath(new URL('../dist/public', import.meta.url)),
      ];
  return candidates.find((dir) => existsSync(join(dir, 'index.html')));
}

/** One servable file, read on first use and kept. */
interface Asset {
  path: string;
  type: string;
  body?: Promise<Uint8Array>;
}

/** The built pages, with the index.html template. */
export class Assets {
  private files?: Promise<Map<string, Asset>>;

  /** @param dir the folder with index.html; undefined: the pages are not built. */
  constructor(readonly dir: string | undefined) {}

  /** True when the pages are built. */
  get built(): boolean {
    return this.dir !== undefined;
  }

  /** The file at `path` (relative, `/`-separated, e.g. `assets/index-3f2a.js`), if it exists. */
  async file(path: string): Promise<{ body: Uint8Array; type: string } | undefined> {
    const asset = (await this.list()).get(path);
    if (!asset) return undefined;
    asset.body ??= readFile(asset.path);
    return { body: await asset.body, type: asset.type };
  }

  /** index.html for this request: the `<base>` and the config block inserted into its head. */
  async index(config: UiConfig): Promise<string> {
    const file = await this.file('index.html');
    const template = file
      ? Buffer.from(file.body).toString('utf8')
      : '<!doctype html><html><head><meta charset="utf-8"><title>Cyclone</title></head><body><p>The pages of @cyclone/ui are not built here: run <code>pnpm build</code> at the repository root (it builds the packages the pages need first), then start the server again. The JSON API answers under <code>api/</code>.</p></body></html>';
    return renderIndex(template, config);
  }

  private list(): Promise<Map<string, Asset>> {
    this.files ??= this.dir ? listFiles(this.dir) : Promise.resolve(new Map());
    return this.files;
  }
}

async function listFiles(dir: string): Promise<Map<string, Asset>> {
  const entries = await readdir(dir, { recursive: true, withFileTypes: true });
  const files = new Map<string, Asset>();
  for (const e of entries) {
    if (!e.isFile()) continue;
    const path = join(e.parentPath, e.name);
    const rel = relative(dir, path).split(sep).join('/');
    // Build metadata (.vite/manifest.json) and other dot-files are not pages.
    if (rel.split('/').some((segment) => segment.startsWith('.'))) continue;
    files.set(rel, {
      path,
      type: TYPES[extname(e.name).toLowerCase()] ?? 'application/octet-stream',
    });
  }
  return files;
}

/** JSON safe inside a `<script>` element: no `<`, `>`, `&` or line separators as such. */
function scriptJson(value: unknown): string {
  return JSON.stringify(value).replace(
    /[<>&\u2028\u2029]/g,
    (ch) => `\\u${ch.charCodeAt(0).toString(16).padStart(4, '0')}`,
  );
}

/**
 * `template` with `<base href="{basePath}/">` and the config block in place of the comment
 * `<!--cyclone:head-->`, or right after `<head>` when the comment is absent. The base path is
 * one validated by `normaliseBasePath` (no character needing escape in an attribute).
 */
export function renderIndex(template: string, config: UiConfig): string {
  const head = `<base href="${config.basePath}/"><script type="application/json" id="cyclone-config">${scriptJson(config)}</script>`;
  if (template.includes('<!--cyclone:head-->')) {
    return template.replace('<!--cyclone:head-->', () => head);
  }
  return template.replace(/<head(\s[^>]*)?>/i, (tag) => `${tag}${head}`);
}

/**
 * `basePath` as the UI uses it: `''` for the root, else `/segment[/segment…]` without a trailing
 * slash.
 * @throws TypeError when a segment has characters other than letters, digits, `-`, `_`, `.`, `~`.
 */
export function normaliseBasePath(basePath: string | undefined): string {
  const trimmed = (basePath ?? '').replace(/\/+$/, '');
  if (trimmed === '') return '';
  const withSlash = trimmed.startsWith('/') ? trimmed : `/${trimmed}`;
  if (!/^(\/[A-Za-z0-9._~-]+)+$/.test(withSlash) || /\/\.\.?(\/|$)/.test(withSlash)) {
    throw new TypeError(
      `basePath '${basePath}' is not a path of letters, digits, '-', '_', '.' and '~' segments`,
    );
  }
  return withSlash;
}
