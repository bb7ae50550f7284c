/**
 * `createUi`: the operator UI as one Hono app — the built pages and the JSON API under a base path
 * chosen at run time — exposed as a web-standard `fetch` handler and as a Node request listener.
 * The server enforces read-only mode, the authorize hook's rights and the CSRF check on every
 * mutation, and applies the redact hook to every payload it sends.
 */
import { readFileSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Client, Logger } from '@cyclone/core';
import { stderrLogger } from '@cyclone/core';
import { createUiReader } from '@cyclone/core/internal';
import { getRequestListener } from '@hono/node-server';
import { type Context, Hono } from 'hono';
import { secureHeaders } from 'hono/secure-headers';
import { getPath } from 'hono/utils/url';
import { type ActionHook, Actions } from './actions.js';
import { Assets, findPublicDir, normaliseBasePath } from './assets.js';
import {
  ALL_RIGHTS,
  type AuthorizeHook,
  isAuthorized,
  NO_RIGHTS,
  type Refused,
  rightsOf,
} from './auth.js';
import { ApiFailure, toApiFailure } from './errors.js';
import { DEFAULT_PREVIEW_BYTES, type RedactHook } from './payload.js';
import { loadLedgerReads, notFound, Reads } from './reads.js';
import {
  CONTENT_SECURITY_POLICY,
  checkMutation,
  hostMatcher,
  LOOPBACK_HOSTS,
  SAFE_METHODS,
} from './security.js';
import {
  BULK_IDS_MAX,
  type MetaResponse,
  PAGE_MAX,
  type Permissions,
  type UiConfig,
} from './shared/api.js';
import * as v from './validate.js';

/** Options of `createUi`. */
export interface UiOptions {
  /**
   * The client whose database the UI shows; every action goes through it (`retry`, `retryAll`,
   * `cancel`, `signal`, the schedule calls). Its pool is not used for reads.
   */
  client: Client;
  /**
   * The path the browser sees the UI at, e.g. `/ops/cyclone` (default: the root). Chosen at run
   * time: index.html gets `<base href>` from it. Requests are accepted with the prefix or
   * without it (a proxy or framework that stripped it).
   */
  basePath?: string;
  /** Refuse every mutation with 403 and tell the pages to offer none. Default false. */
  readOnly?: boolean;
  /**
   * Who the user is and what they may do, asked on every request but the health checks and
   * robots.txt (`basicAuth`, `bearerToken`, `anyOf`, or your own). Without it everyone may do
   * everything (mount the UI behind your own authentication, or on loopback only).
   */
  authorize?: AuthorizeHook;
  /** Masks payloads before they leave the process (inputs, outputs, errors, ledger bodies). */
  redact?: RedactHook;
  /** Most runs one bulk call acts on. Default 1,000. */
  maxBulk?: number;
  /** Payloads longer than this many bytes come as a preview (the download has all). Default 64 KiB. */
  previewBytes?: number;
  /**
   * Where actions are logged with their user (the audit log) and failures reported. Default:
   * core's stderr logger at `info` (`CYCLONE_LOG` overrides the level).
   */
  logger?: Logger;
  /** Called after every action with its audit event (your own audit trail). */
  onAction?: ActionHook;
  /**
   * Origins allowed to send actions besides the request's own host, e.g. the public
   * `https://ops.example.com` when a proxy rewrites the Host header.
   */
  trustedOrigins?: string[];
  /**
   * The host names the UI answers to, compared with the request's `Host` header: `example.com`
   * (any port) or `example.com:7801`, IPv6 in brackets (`[::1]`). Any other host is refused with
   * 403 `host_not_allowed` on every request but the health checks and robots.txt, which stops DNS
   * rebinding (a page of another site whose name now resolves to this server). Default: without
   * `authorize`, loopback only (`localhost`, `127.0.0.1`, `[::1]`); with it, any host.
   * @throws TypeError (from `createUi`) for an entry that is not a host name with an optional port.
   */
  allowedHosts?: string[];
  /** Polling interval the pages use, ms. Default 3,000. */
  refreshMs?: number;
  /** The pages show payloads collapsed until asked for. Default false. */
  hidePayloadsByDefault?: boolean;
  /** The reader's own pool: connections (default 3) and statement timeout in ms (default 5,000). */
  reader?: { max?: number; statementTimeoutMs?: number; connectionString?: string };
  /** Folder of the built pages; default the package's own `dist/public`. */
  assetsDir?: string;
}

/** What `createUi` returns. */
export interface Ui {
  /** The whole UI as a web-standard handler (Hono, Deno, Bun, any `fetch`-style server). */
  fetch: (request: Request) => Promise<Response>;
  /**
   * The whole UI as a Node request listener: `http.createServer(ui.nodeHandler)`,
   * `app.use('/ops/cyclone', ui.nodeHandler)` in Express (it reads `originalUrl`), or Fastify
   * through `reply.hijack()` (see docs/ui.md).
   */
  nodeHandler: (req: IncomingMessage, res: ServerResponse) => Promise<void>;
  /** Closes the reader's pool. The client is the caller's and stays open. */
  close: () => Promise<void>;
  /** The base path in use (normalised: `''` or `/a/b`). */
  basePath: string;
}

type Env = { Variables: { user: string | null; can: Permissions } };

const VERSION: string = JSON.parse(
  readFileSync(new URL('../package.json', import.meta.url), 'utf8'),
).version;

/** Default level of the UI's own logger: `CYCLONE_LOG` when it names a level, else `info`. */
function defaultLogger(): Logger {
  const env = process.env.CYCLONE_LOG?.trim().toLowerCase();
  const levels = ['debug', 'info', 'warn', 'error', 'silent'] as const;
  const level = levels.find((l) => l === env) ?? 'info';
  return stderrLogger({ level });
}

/**
 * The operator UI for `options.client`'s database. Reads go through a reader of their own (a
 * small pool, each read a read-only transaction with a statement timeout); actions through the
 * client.
 * @throws TypeError for a bad `basePath`, a `maxBulk`/`previewBytes` that is not a positive
 *   integer, or an `allowedHosts` entry that is not a host name with an optional port.
 */
export function createUi(options: UiOptions): Ui {
  const basePath = normaliseBasePath(options.basePath);
  const maxBulk = positive(options.maxBulk ?? 1000, 'maxBulk');
  const previewBytes = positive(options.previewBytes ?? DEFAULT_PREVIEW_BYTES, 'previewBytes');
  const readOnly = options.readOnly === true;
  const client = options.client;
  const logger = options.logger ?? defaultLogger();
  const trusted = new Set(options.trustedOrigins ?? []);
  const allowedHosts = options.allowedHosts ?? (options.authorize ? null : LOOPBACK_HOSTS);
  const hostAllowed = allowedHosts ? hostMatcher(allowedHosts) : () => true;
  const reader = createUiReader({
    client,
    ...(options.reader?.connectionString
      ? { connectionString: options.reader.connectionString }
      : {}),
    ...(options.reader?.max !== undefined ? { max: options.reader.max } : {}),
    ...(options.reader?.statementTimeoutMs !== undefined
      ? { statementTimeoutMs: options.reader.statementTimeoutMs }
      : {}),
  });
  const ledger = loadLedgerReads();
  const reads = new Reads(reader, ledger, options.redact, previewBytes);
  const actions = new Actions(client, reads, logger, options.onAction, maxBulk);
  const assets = new Assets(findPublicDir(options.assetsDir));
  // Present from the core release that has flow control on; an older peer core lacks it.
  const hasLimits = typeof (client as Partial<Client>).listLimits === 'function';

  const config = (user: string | null, can: Permissions): UiConfig => ({
    basePath,
    apiBase: `${basePath}/api`,
    readOnly,
    version: VERSION,
    user,
    can,
    refreshMs: options.refreshMs ?? 3000,
    hidePayloadsByDefault: options.hidePayloadsByDefault === true,
  });

  const app = new Hono<Env>({
    // Routes are written from the root; the prefix is taken off when the request has it.
    getPath: (req) => {
      const path = getPath(req);
      if (basePath === '') return path;
      if (path === basePath) return '/';
      return path.startsWith(`${basePath}/`) ? path.slice(basePath.length) : path;
    },
  });

  app.onError((err, c) => {
    const failure = toApiFailure(err);
    if (failure.status >= 500 && failure.code === 'internal') {
      logger.error({ err, path: c.req.path }, 'cyclone-ui: request failed');
    }
    return c.json(failure.body(), failure.status, failure.headers);
  });

  app.use(
    '*',
    secureHeaders({
      contentSecurityPolicy: CONTENT_SECURITY_POLICY,
      referrerPolicy: 'no-referrer',
      xFrameOptions: 'DENY',
      crossOriginEmbedderPolicy: false,
      strictTransportSecurity: false,
    }),
  );

  // Open to all: probes and crawlers carry no credentials, and these say nothing about runs.
  app.get('/robots.txt', (c) => c.text('User-agent: *\nDisallow: /\n'));
  app.get('/api/health/live', (c) => noStore(c.json({ ok: true })));
  app.get('/api/health/ready', async (c) => {
    try {
      await reader.read((q) => q.query('SELECT 1'));
      return noStore(c.json({ ok: true }));
    } catch {
      return noStore(c.json({ ok: false, error: 'unavailable' }, 503));
    }
  });

  // Only the hosts named, before anything else (the checks above say nothing about runs).
  app.use('*', async (c, next) => {
    if (!hostAllowed(c.req.raw)) {
      throw new ApiFailure(
        403,
        'host_not_allowed',
        'This host name is not one this UI answers to (allowedHosts).',
      );
    }
    return next();
  });

  // Who the user is, before anything else is answered.
  app.use('*', async (c, next) => {
    if (!options.authorize) {
      c.set('user', null);
      c.set('can', readOnly ? { ...NO_RIGHTS } : { ...ALL_RIGHTS });
      return next();
    }
    const answer = await options.authorize(c.req.raw);
    if (!isAuthorized(answer)) throw refusal(answer || undefined);
    c.set('user', answer.user);
    c.set('can', readOnly ? { ...NO_RIGHTS } : rightsOf(answer));
    return next();
  });

  app.use('/api/*', async (c, next) => {
    await next();
    c.header('Cache-Control', 'no-store');
  });

  // Mutations: read-only first (neither the body nor the database is looked at), then CSRF.
  app.use('*', async (c, next) => {
    if (SAFE_METHODS.has(c.req.method)) return next();
    if (readOnly) {
      throw new ApiFailure(403, 'read_only', 'This UI is read-only: it takes no action.');
    }
    checkMutation(c.req.raw, trusted);
    return next();
  });

  const need = (c: Context<Env>, right: keyof Permissions) => {
    if (!c.get('can')[right]) {
      throw new ApiFailure(403, 'forbidden', `${c.get('user') ?? 'You'} may not ${right} here.`);
    }
  };
  // An action's body: the largest payload the client takes, and room for the rest of the JSON.
  const maxBody = client.maxPayloadBytes + 64 * 1024;
  const body = async (c: Context<Env>): Promise<unknown> => {
    const text = await readBody(c.req.raw, maxBody);
    try {
      return JSON.parse(text);
    } catch {
      throw new ApiFailure(400, 'bad_request', 'The request body is not JSON.');
    }
  };
  const query = (c: Context<Env>) => c.req.query();
  const runIdOf = (c: Context<Env>) => {
    const id = c.req.param('id') ?? '';
    // Not a uuid: no such run (as core answers), rather than a 400.
    if (!v.runId.safeParse(id).success) throw notFound(id);
    return id.toLowerCase();
  };

  // Reads.
  app.get('/api/meta', async (c) => {
    const meta: MetaResponse = {
      ...config(c.get('user'), c.get('can')),
      features: {
        schedules: typeof client.listSchedules === 'function',
        signals: typeof client.signal === 'function',
        limits: hasLimits,
        workers: true,
        throughput: true,
        ledger: await reads.hasLedger(),
      },
      limits: { maxBulk, previewBytes, pageMax: PAGE_MAX, bulkIdsMax: BULK_IDS_MAX },
    };
    return c.json(meta);
  });
  app.get('/api/overview', async (c) => c.json(await reads.overview()));
  app.get('/api/stats/throughput', async (c) =>
    c.json(await reads.throughput(v.parse(v.throughputQuery, query(c), 'query'))),
  );
  app.get('/api/runs', async (c) =>
    c.json(await reads.runs(v.parse(v.runsQuery, query(c), 'query'))),
  );
  app.get('/api/lookup', async (c) => {
    const { q } = v.parse(v.lookupQuery, query(c), 'query');
    const items = await reads.lookup(q);
    if (items.length === 0) {
      throw new ApiFailure(404, 'not_found', 'No run, submit key or idempotency key matches.');
    }
    return c.json({ items });
  });
  app.get('/api/workflows', async (c) => c.json(await reads.workflows()));
  app.get('/api/health/workers', async (c) => c.json(await reads.health()));
  app.get('/api/unknown', async (c) =>
    c.json(await reads.unknown(v.parse(v.unknownQuery, query(c), 'query'))),
  );
  app.get('/api/schedules', async (c) => {
    const items = await client.listSchedules();
    return c.json({ items: JSON.parse(JSON.stringify(items)) });
  });
  app.get('/api/limits', async (c) => {
    if (!hasLimits) {
      throw new ApiFailure(404, 'not_supported', 'This version of @cyclone/core has no limits.');
    }
    return c.json({ items: JSON.parse(JSON.stringify(await client.listLimits())) });
  });
  app.get('/api/runs/:id', async (c) => c.json(await reads.run(runIdOf(c))));
  app.get('/api/runs/:id/input', async (c) => {
    const id = runIdOf(c);
    const { raw } = v.parse(v.inputQuery, query(c), 'query');
    if (raw === '1') {
      const text = await reads.inputText(id);
      if (text === null) throw notFound(id);
      return download(c, text, `${id}-input.json`);
    }
    const input = await reads.input(id);
    if (!input) throw notFound(id);
    return c.json({ input });
  });
  app.get('/api/runs/:id/steps/:node', async (c) =>
    c.json({ step: await reads.step(runIdOf(c), c.req.param('node')) }),
  );
  app.get('/api/runs/:id/steps/:node/output', async (c) => {
    const id = runIdOf(c);
    const node = c.req.param('node');
    const text = await reads.outputText(id, node);
    if (text === undefined) {
      throw new ApiFailure(404, 'node_not_found', `Run ${id} has no node '${node}'.`);
    }
    if (text === null) throw new ApiFailure(404, 'not_found', `Node '${node}' has no output.`);
    return download(c, text, `${id}-${fileSafe(node)}-output.json`);
  });
  app.get('/api/runs/:id/ledger', async (c) => {
    const { node } = v.parse(v.ledgerQuery, query(c), 'query');
    return c.json({ items: await reads.ledgerOf(runIdOf(c), node) });
  });

  // Actions.
  app.post('/api/runs/bulk', async (c) => {
    const b = v.parse(v.bulkBody, await body(c), 'body');
    need(c, b.action === 'cancel' ? 'cancel' : 'retry');
    return c.json(await actions.bulk(c.get('user'), b));
  });
  app.post('/api/runs/:id/retry', async (c) => {
    need(c, 'retry');
    const id = runIdOf(c);
    const b = v.parse(v.retryBody, await body(c), 'body');
    return c.json(
      'node' in b
        ? await actions.retry(c.get('user'), id, b.node)
        : await actions.retryAll(c.get('user'), id),
    );
  });
  app.post('/api/runs/:id/cancel', async (c) => {
    need(c, 'cancel');
    const id = runIdOf(c);
    v.parse(v.emptyBody, await body(c), 'body');
    return c.json(await actions.cancel(c.get('user'), id));
  });
  app.post('/api/runs/:id/signal', async (c) => {
    need(c, 'signal');
    const id = runIdOf(c);
    const b = v.parse(v.signalBody, await body(c), 'body');
    return c.json(await actions.signal(c.get('user'), id, b.name, b.payload));
  });
  app.post('/api/schedules/:name/:action{pause|resume|trigger}', async (c) => {
    need(c, 'schedules');
    v.parse(v.emptyBody, await body(c), 'body');
    const action = c.req.param('action') as 'pause' | 'resume' | 'trigger';
    return c.json(await actions.schedule(c.get('user'), c.req.param('name'), action));
  });

  app.all('/api/*', () => {
    throw new ApiFailure(404, 'not_found', 'No such API path.');
  });

  // The pages: a built file when the path names one, else index.html (the page's own routes).
  app.get('*', async (c) => {
    const path = c.req.path.replace(/^\/+/, '');
    if (path !== '' && path !== 'index.html') {
      const file = await assets.file(path);
      if (file) {
        const immutable = path.startsWith('assets/');
        return c.body(file.body as Uint8Array<ArrayBuffer>, 200, {
          'Content-Type': file.type,
          'Cache-Control': immutable ? 'public, max-age=31536000, immutable' : 'no-cache',
        });
      }
      // A missing asset is a 404, not the page (a stale tab asking for an old build's file).
      if (path.startsWith('assets/')) return c.text('Not found', 404);
    }
    const html = await assets.index(config(c.get('user'), c.get('can')));
    return c.html(html, 200, { 'Cache-Control': 'no-store' });
  });
  app.all('*', () => {
    throw new ApiFailure(404, 'not_found', 'Not found.');
  });

  const fetch = async (request: Request): Promise<Response> => app.fetch(request);
  const listener = getRequestListener((request) => app.fetch(request), {
    // Keep the process's own Request and Response: the UI must not change them for its host.
    overrideGlobalObjects: false,
  });
  const nodeHandler = (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    prepareIncoming(req);
    return listener(req, res);
  };
  let closed: Promise<void> | undefined;
  return {
    fetch,
    nodeHandler,
    basePath,
    close: () => {
      closed ??= reader.close();
      return closed;
    },
  };
}

/**
 * Express rewrites `req.url` under a mount path and keeps the full one in `originalUrl`: the UI
 * routes on the full path (the base path is taken off by itself). A body a JSON parser already
 * read is handed on as the raw body the Node bridge reads.
 */
function prepareIncoming(req: IncomingMessage): void {
  const r = req as IncomingMessage & { originalUrl?: unknown; body?: unknown; rawBody?: unknown };
  if (typeof r.originalUrl === 'string') r.url = r.originalUrl;
  if (r.readableEnded && r.rawBody === undefined && r.body !== undefined) {
    r.rawBody = Buffer.from(typeof r.body === 'string' ? r.body : JSON.stringify(r.body));
  }
}

/**
 * The request's body as UTF-8 text, at most `max` bytes: refused by its Content-Length when it
 * has one, else counted as it streams (a chunked body has none). Read here rather than by Hono's
 * body-limit middleware, which rebuilds the request with the global `Request` and so fails on the
 * Node bridge's own request objects.
 * @throws ApiFailure 400 `bad_request` when the body is larger.
 */
async function readBody(request: Request, max: number): Promise<string> {
  const tooLarge = () => new ApiFailure(400, 'bad_request', 'The request body is too large.');
  if (Number(request.headers.get('content-length') ?? 0) > max) throw tooLarge();
  if (!request.body) return '';
  const reader = request.body.getReader();
  const parts: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > max) {
      await reader.cancel().catch(() => {});
      throw tooLarge();
    }
    parts.push(value);
  }
  return Buffer.concat(parts).toString('utf8');
}

function refusal(answer: Refused | undefined): ApiFailure {
  const status = answer?.refuse === 403 ? 403 : 401;
  const message =
    answer?.message ?? (status === 401 ? 'Authentication is needed.' : 'You may not use this UI.');
  return new ApiFailure(status, status === 401 ? 'unauthorized' : 'forbidden', message, {
    headers: answer?.challenge ? { 'WWW-Authenticate': answer.challenge } : {},
  });
}

function noStore(res: Response): Response {
  res.headers.set('Cache-Control', 'no-store');
  return res;
}

function download(c: Context<Env>, text: string, filename: string): Response {
  return c.body(text, 200, {
    'Content-Type': 'application/json; charset=utf-8',
    'Content-Disposition': `attachment; filename="${filename}"`,
  });
}

/** `name` with only characters safe in a quoted filename. */
function fileSafe(name: string): string {
  return name.replace(/[^A-Za-z0-9._-]/g, '_').slice(0, 100);
}

function positive(n: number, name: string): number {
  if (!Number.isSafeInteger(n) || n < 1) {
    throw new TypeError(`${name} must be a positive integer, got ${n}`);
  }
  return n;
}
