/**
 * `cyclone workers` and `cyclone ui`: the registered workers as a table and as JSON; the UI served
 * by @cyclone/ui on loopback (meta answers, read-only shown, basic auth enforced), refused on a
 * non-loopback address without auth, and a clear message when @cyclone/ui is not installed (a
 * child process outside the workspace, where nothing provides it). The Host names it answers to
 * (loopback without auth, so DNS rebinding is refused; `--allowed-host` for a proxy) and a blank
 * or spaced token refused at start.
 */
import { spawn } from 'node:child_process';
import { request } from 'node:http';
import { deferred } from '@cyclone/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { main, type UiModule } from '../src/cli.js';
import { Client } from '../src/index.js';
import { Registry } from '../src/registry.js';
import { PACKAGE_DIR } from './support/cli-process.js';
import { createTestDb, type TestDb } from './support/db.js';
import { captureLogger } from './support/logger.js';

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

/** Runs the CLI in-process; `until` ends a `cyclone ui`. */
async function cli(
  args: string[],
  extra: { until?: Promise<unknown>; onOut?: (text: string) => void; env?: object } = {},
) {
  let stdout = '';
  let stderr = '';
  const code = await main(args, {
    stdout: {
      write: (s: string) => {
        stdout += s;
        extra.onOut?.(stdout);
      },
    },
    stderr: { write: (s: string) => (stderr += s) },
    env: { DATABASE_URL: db.url, ...extra.env },
    loadUi: async () => (await import('../../ui/src/index.js')) as unknown as UiModule,
    ...(extra.until ? { until: extra.until } : {}),
  });
  return { code, stdout, stderr };
}

/** Starts `cyclone ui` with `args`; resolves with its URL once it listens, and a stop function. */
async function serve(args: string[], env: object = {}) {
  const stop = deferred<void>();
  const listening = deferred<string>();
  const done = cli(['ui', '--port', '0', ...args], {
    until: stop.promise,
    env,
    onOut: (text) => {
      const m = /Cyclone UI on (http:\/\/\S+)/.exec(text);
      if (m?.[1]) listening.resolve(m[1]);
    },
  });
  const url = await Promise.race([
    listening.promise,
    done.then((r) => {
      throw new Error(`cyclone ui exited ${r.code}: ${r.stderr}`);
    }),
  ]);
  return {
    url,
    stop: async () => {
      stop.resolve();
      return done;
    },
  };
}

describe('cyclone workers', () => {
  it('lists the registered workers, as a table and as JSON', async () => {
    expect((await cli(['workers'])).stdout).toMatch(/^no workers/);
    const { logger } = captureLogger();
    const registry = new Registry(
      { pool: db.pool, db: client.db, log: logger, inFlight: () => 2 },
      { workerId: 'cli-worker-1', concurrency: 8, workflows: ['checkout', 'refund'] },
    );
    await registry.runOnce();
    try {
      const table = await cli(['workers']);
      expect(table.code).toBe(0);
      const [header, row] = table.stdout.trim().split('\n');
      expect(header).toMatch(
        /^WORKER\s+HOST\s+PID\s+STATE\s+IN FLIGHT\s+STARTED\s+SEEN\s+WORKFLOWS$/,
      );
      expect(row).toMatch(/^cli-worker-1\s.*\salive\s+2\/8\s.*\scheckout,refund$/);
      const json = await cli(['workers', '--json']);
      expect(JSON.parse(json.stdout)).toEqual([
        expect.objectContaining({
          workerId: 'cli-worker-1',
          pid: process.pid,
          inFlight: 2,
          concurrency: 8,
          workflows: ['checkout', 'refund'],
          alive: true,
        }),
      ]);
    } finally {
      await registry.stop();
    }
  });
});

/** GET `url` with this Host header (fetch sets its own); the status. */
function statusWithHost(url: string, host: string, headers: Record<string, string> = {}) {
  return new Promise<number>((resolve, reject) => {
    const u = new URL(url);
    const req = request(
      { host: u.hostname, port: u.port, path: u.pathname, headers: { ...headers, Host: host } },
      (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
      },
    );
    req.on('error', reject);
    req.end();
  });
}

describe('cyclone ui: hosts and tokens', () => {
  it('answers loopback names only without auth, and the --allowed-host names', async () => {
    const ui = await serve(['--allowed-host', 'ops.example', '--allowed-host', 'proxy:8080']);
    try {
      const meta = `${ui.url}api/meta`;
      const port = new URL(ui.url).port;
      expect(await statusWithHost(meta, `127.0.0.1:${port}`)).toBe(200);
      expect(await statusWithHost(meta, `localhost:${port}`)).toBe(200);
      expect(await statusWithHost(meta, 'ops.example')).toBe(200);
      expect(await statusWithHost(meta, 'proxy:8080')).toBe(200);
      expect(await statusWithHost(meta, 'proxy:8081')).toBe(403);
      expect(await statusWithHost(meta, `rebind.attacker.example:${port}`)).toBe(403);
    } finally {
      expect((await ui.stop()).code).toBe(0);
    }
    const plain = await serve([]);
    try {
      const port = new URL(plain.url).port;
      const meta = `${plain.url}api/meta`;
      expect(await statusWithHost(meta, `rebind.attacker.example:${port}`)).toBe(403);
    } finally {
      expect((await plain.stop()).code).toBe(0);
    }
  });

  it('refuses a blank token at start and trims one from the environment', async () => {
    const blank = await cli(['ui', '--port', '0', '--token', ' ']);
    expect(blank.code).toBe(2);
    expect(blank.stderr).toMatch(/--token/);
    const spaced = await cli(['ui', '--port', '0', '--token', 'a b']);
    expect(spaced.code).toBe(2);
    const ui = await serve([], { CYCLONE_UI_TOKEN: 's3cret\n' });
    try {
      const meta = `${ui.url}api/meta`;
      const port = new URL(ui.url).port;
      const auth = { Authorization: 'Bearer s3cret' };
      expect(await statusWithHost(meta, `127.0.0.1:${port}`, auth)).toBe(200);
      // With auth, any host unless --allowed-host names some.
      expect(await statusWithHost(meta, `ops.example:${port}`, auth)).toBe(200);
    } finally {
      expect((await ui.stop()).code).toBe(0);
    }
  });
});

describe('cyclone ui', () => {
  it('serves the UI on loopback, read-only when asked', async () => {
    const ui = await serve(['--read-only', '--base-path', '/ops/cyclone']);
    try {
      expect(ui.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/ops\/cyclone\/$/);
      const meta = await fetch(`${ui.url}api/meta`);
      expect(meta.status).toBe(200);
      expect(await meta.json()).toMatchObject({ readOnly: true, basePath: '/ops/cyclone' });
      const overview = await fetch(`${ui.url}api/overview`);
      expect(overview.status).toBe(200);
    } finally {
      expect((await ui.stop()).code).toBe(0);
    }
  });

  it('asks for the basic-auth credentials it was given (from the environment)', async () => {
    const ui = await serve([], { CYCLONE_UI_BASIC_AUTH: 'ops:s3cret' });
    try {
      expect((await fetch(`${ui.url}api/meta`)).status).toBe(401);
      const wrong = `Basic ${Buffer.from('ops:nope').toString('base64')}`;
      expect((await fetch(`${ui.url}api/meta`, { headers: { authorization: wrong } })).status).toBe(
        401,
      );
      const right = `Basic ${Buffer.from('ops:s3cret').toString('base64')}`;
      const ok = await fetch(`${ui.url}api/meta`, { headers: { authorization: right } });
      expect(ok.status).toBe(200);
      expect(await ok.json()).toMatchObject({ user: 'ops' });
    } finally {
      await ui.stop();
    }
  });

  it('refuses a non-loopback address without auth, and bad auth options', async () => {
    const open = await cli(['ui', '--host', '0.0.0.0', '--port', '0']);
    expect(open.code).toBe(2);
    expect(open.stderr).toMatch(/refusing to serve the UI on 0\.0\.0\.0 without auth/);
    const both = await cli(['ui', '--basic-auth', 'a:b', '--token', 't']);
    expect(both.code).toBe(2);
    const bad = await cli(['ui', '--basic-auth', 'no-colon']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/must be user:password/);
    // With a token, a public address is allowed (and needs the token).
    const ui = await serve(['--host', '0.0.0.0'], { CYCLONE_UI_TOKEN: 'tok-123' });
    try {
      const port = new URL(ui.url).port;
      expect((await fetch(`http://127.0.0.1:${port}/api/meta`)).status).toBe(401);
      const ok = await fetch(`http://127.0.0.1:${port}/api/meta`, {
        headers: { authorization: 'Bearer tok-123' },
      });
      expect(ok.status).toBe(200);
    } finally {
      await ui.stop();
    }
  });

  it('says how to install @cyclone/ui when it is missing', { timeout: 120_000 }, async () => {
    // A child process in packages/core: core does not depend on @cyclone/ui, so neither core's
    // location nor the working directory provides it.
    const child = spawn(
      process.execPath,
      ['--conditions=@cyclone/source', '--import', 'tsx', 'src/cli.ts', 'ui', '--port', '0'],
      {
        cwd: PACKAGE_DIR,
        // Without the NODE_PATH of vitest's bin shim, which reaches every workspace package.
        env: { ...process.env, DATABASE_URL: db.url, NODE_PATH: '' },
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c) => (stdout += c));
    child.stderr.on('data', (c) => (stderr += c));
    // Had it found the package, it would serve until stopped: stop it so the test fails plainly.
    const guard = setTimeout(() => child.kill('SIGTERM'), 100_000);
    const code = await new Promise<number>((resolve) => child.on('close', (c) => resolve(c ?? -1)));
    clearTimeout(guard);
    expect(stdout).toBe('');
    expect(stderr).toMatch(/@cyclone\/ui is not installed.*npm install @cyclone\/ui/);
    expect(code).toBe(1);
  });
});
