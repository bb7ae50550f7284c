import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { count, deferred, waitFor } from '@cyclone/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { main } from '../src/cli.js';
import { Client } from '../src/client.js';
import { newAction, newWorkflow } from '../src/definitions.js';
import { NonRetryableError } from '../src/errors.js';
import { migrations } from '../src/migrations.generated.js';
import { Worker } from '../src/worker.js';
import { spawnCli as spawnCliProcess } from './support/cli-process.js';
import { createTestDb, type TestDb } from './support/db.js';

const PACKAGE_DIR = resolve(dirname(fileURLToPath(import.meta.url)), '..');

interface Result {
  code: number;
  stdout: string;
  stderr: string;
}

let db: TestDb;
let client: Client;
let worker: Worker;

/** Nodes that fail (NonRetryableError) until their run is healed. */
const healed = new Set<string>();
/** Handler calls per `${runId}:${node}`. */
const calls = new Map<string, number>();

type OrderInput = { orderId: string; fail: string[] };

const step = (name: string) =>
  newAction(
    name,
    async (ctx, input: OrderInput) => {
      const key = `${ctx.runId}:${ctx.node}`;
      calls.set(key, (calls.get(key) ?? 0) + 1);
      if (input.fail.includes(ctx.node) && !healed.has(ctx.runId)) {
        throw new NonRetryableError(`${ctx.node} declined for ${input.orderId}`);
      }
      return { node: ctx.node, attempt: ctx.attempt };
    },
    { maxAttempts: 3 },
  );

const Order = newWorkflow<OrderInput>('cli_order', {
  nodes: {
    reserve: { action: step('cli_reserve') },
    charge: { action: step('cli_charge'), after: ['reserve'] },
    email: { action: step('cli_email'), after: ['reserve'] },
    fulfil: { action: step('cli_fulfil'), after: ['charge', 'email'] },
  },
});

/** A workflow no worker runs: its runs stay `running` until cancelled. */
const Idle = newWorkflow('cli_idle', {
  nodes: { wait: { action: newAction('cli_wait', () => null) } },
});

/** The CLI in-process, on the test database (via --database-url unless `env` says otherwise). */
async function cli(args: string[], env: Record<string, string | undefined> = {}): Promise<Result> {
  let stdout = '';
  let stderr = '';
  const argv = 'DATABASE_URL' in env ? args : ['--database-url', db.url, ...args];
  const code = await main(argv, {
    stdout: { write: (s: string) => (stdout += s) },
    stderr: { write: (s: string) => (stderr += s) },
    env,
  });
  return { code, stdout, stderr };
}

/** The CLI as a child process: `node <nodeArgs> <entry> args`, cwd packages/core. */
const spawnCli = (nodeArgs: string[], args: string[]): Promise<Result> =>
  spawnCliProcess(db.url, nodeArgs, args);
const fromSource = (args: string[]) =>
  spawnCli(['--conditions=@cyclone/source', '--import', 'tsx', 'src/cli.ts'], args);

/** Exactly one line on stderr, starting `cyclone: `, and no stack trace. */
function expectOneLineError(r: Result, pattern: RegExp): void {
  expect(r.stderr).toMatch(/^cyclone: [^\n]+\n$/);
  expect(r.stderr).toMatch(pattern);
  expect(r.stderr).not.toMatch(/\n\s+at /);
}

async function submitAndWait(fail: string[]): Promise<string> {
  const { runId } = await client.submit(Order, { orderId: `o-${Math.random()}`, fail });
  await client.waitForRun(runId, { timeoutMs: 20_000, pollMs: 20 });
  return runId;
}

beforeAll(async () => {
  db = await createTestDb();
  client = new Client({ connectionString: db.url });
  worker = new Worker({
    client,
    workflows: [Order],
    concurrency: 4,
    pollIntervalMs: 50,
    sweepIntervalMs: 500,
    leaseMs: 5_000,
  });
  await worker.start();
});

afterAll(async () => {
  await worker?.stop({ graceMs: 5_000 });
  await client?.close();
  await db?.drop();
});

describe('cyclone migrate', () => {
  it('applies the migrations to a new schema, then reports it up to date', async () => {
    const first = await cli(['--schema', 'cli_mig', 'migrate']);
    expect(first).toMatchObject({ code: 0, stderr: '' });
    expect(first.stdout).toBe(
      `migrated schema cli_mig: ${migrations.map((m) => m.name).join(', ')}\n`,
    );
    const again = await cli(['--schema', 'cli_mig', 'migrate']);
    expect(again).toEqual({ code: 0, stdout: 'schema cli_mig is up to date\n', stderr: '' });
    expect(
      await count(db.pool, "SELECT 1 FROM cli_mig.cyclone_migrations WHERE component = 'core'"),
    ).toBe(migrations.length);
  });

  it('reads DATABASE_URL from the environment when --database-url is not given', async () => {
    const r = await cli(['migrate'], { DATABASE_URL: db.url });
    expect(r).toEqual({ code: 0, stdout: 'schema cyclone is up to date\n', stderr: '' });
  });

  it('an unmigrated schema is a one-line failure that says what to do', async () => {
    const r = await cli(['--schema', 'cli_nothing_here', 'runs']);
    expect(r.code).toBe(1);
    expectOneLineError(r, /cyclone_runs" does not exist .*cyclone migrate/);
  });
});

describe('cyclone runs / run', () => {
  let completed: string;
  let failed: string;

  beforeAll(async () => {
    completed = await submitAndWait([]);
    failed = await submitAndWait(['charge']);
  });

  it('runs --json lists runs newest first, filtered by state, workflow and limit', async () => {
    const all = await cli(['runs', '--json']);
    expect(all.code).toBe(0);
    const runs = JSON.parse(all.stdout) as {
      runId: string;
      state: string;
      workflow: string;
      stepsRemaining: number;
    }[];
    expect(runs.map((r) => r.runId).slice(0, 2)).toEqual([failed, completed]);
    expect(runs.find((r) => r.runId === completed)).toMatchObject({
      state: 'completed',
      workflow: 'cli_order',
      stepsRemaining: 0,
    });
    expect(runs.find((r) => r.runId === failed)).toMatchObject({
      state: 'failed',
      stepsRemaining: 2,
    });

    const onlyFailed = JSON.parse((await cli(['runs', '--state', 'failed', '--json'])).stdout) as {
      runId: string;
    }[];
    expect(onlyFailed.map((r) => r.runId)).toContain(failed);
    expect(onlyFailed.map((r) => r.runId)).not.toContain(completed);

    const limited = JSON.parse((await cli(['runs', '--limit', '1', '--json'])).stdout) as unknown[];
    expect(limited).toHaveLength(1);

    const none = await cli(['runs', '--workflow', 'no_such_workflow', '--json']);
    expect(JSON.parse(none.stdout)).toEqual([]);
  });

  it('runs prints a readable table', async () => {
    const r = await cli(['runs', '--workflow', 'cli_order']);
    expect(r.code).toBe(0);
    const lines = r.stdout.trimEnd().split('\n');
    expect(lines[0]).toMatch(/^RUN\s+WORKFLOW\s+STATE\s+STEPS LEFT\s+CREATED\s+SUBMIT KEY$/);
    expect(lines.find((l) => l.startsWith(failed))).toMatch(/cli_order\s+failed\s+2\s+\d{4}-/);
    expect(lines.find((l) => l.startsWith(completed))).toMatch(/cli_order\s+completed\s+0\s+/);
    expect((await cli(['runs', '--workflow', 'no_such_workflow'])).stdout).toBe('no runs\n');
  });

  it('run --json shows every node with state, attempts, errors and upstream nodes', async () => {
    const r = await cli(['run', failed, '--json']);
    expect(r.code).toBe(0);
    const run = JSON.parse(r.stdout);
    expect(run).toMatchObject({ runId: failed, workflow: 'cli_order', state: 'failed' });
    const byNode = Object.fromEntries(run.steps.map((s: { node: string }) => [s.node, s]));
    expect(byNode.reserve).toMatchObject({
      state: 'completed',
      attempt: 1,
      maxAttempts: 3,
      after: [],
    });
    expect(byNode.email).toMatchObject({ state: 'completed', after: ['reserve'] });
    expect(byNode.charge).toMatchObject({ state: 'discarded', attempt: 1, after: ['reserve'] });
    expect(byNode.charge.errors).toHaveLength(1);
    expect(byNode.charge.errors[0]).toMatchObject({ attempt: 1, kind: 'non_retryable' });
    expect(byNode.charge.errors[0].message).toMatch(/charge declined/);
    expect(byNode.fulfil).toMatchObject({
      state: 'pending',
      attempt: 0,
      after: ['charge', 'email'],
    });
  });

  it('run prints the DAG as a table: the last error of a discarded node, nothing under a completed one', async () => {
    const r = await cli(['run', failed]);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain(`run       ${failed}`);
    expect(r.stdout).toMatch(/state\s+failed/);
    const rows = r.stdout.split('\n');
    const header = rows.findIndex((l) => /^NODE\s+STATE\s+ATTEMPT\s+AFTER\s+DETAIL$/.test(l));
    expect(header).toBeGreaterThan(0);
    const table = rows.slice(header + 1).filter(Boolean);
    expect(table[0]).toMatch(/^reserve\s+completed\s+1\/3\s+-\s+-$/);
    expect(table.find((l) => l.startsWith('charge'))).toMatch(
      /^charge\s+discarded\s+1\/3\s+reserve\s+\[non_retryable\] charge declined/,
    );
    expect(table.find((l) => l.startsWith('fulfil'))).toMatch(
      /^fulfil\s+pending\s+0\/3\s+charge,email\s+-$/,
    );
  });

  it('an unknown run is exit 1 with one line', async () => {
    const missing = '00000000-0000-4000-8000-000000000000';
    const r = await cli(['run', missing]);
    expect(r).toMatchObject({ code: 1, stdout: '' });
    expectOneLineError(r, new RegExp(`^cyclone: run ${missing} not found\\n$`));
    const notUuid = await cli(['run', '123', '--json']);
    expect(notUuid.code).toBe(1);
    expectOneLineError(notUuid, /^cyclone: run 123 not found\n$/);
  });
});

describe('cyclone retry', () => {
  it('reopens a discarded node in place: same run, the attempt keeps counting, the run completes', async () => {
    const runId = await submitAndWait(['charge']);
    expect((await client.getRun(runId)).state).toBe('failed');
    healed.add(runId);

    const r = await cli(['retry', runId, 'charge']);
    expect(r).toEqual({ code: 0, stdout: `reopened charge of run ${runId}\n`, stderr: '' });

    const run = await client.waitForRun(runId, { timeoutMs: 20_000, pollMs: 20 });
    expect(run.state).toBe('completed');
    const charge = run.steps.find((s) => s.node === 'charge');
    expect(charge).toMatchObject({
      state: 'completed',
      attempt: 2,
      output: { node: 'charge', attempt: 2 },
    });
    expect(charge?.errors.map((e) => e.attempt)).toEqual([1]);
    // Completed nodes never ran again; the join ran once.
    expect(calls.get(`${runId}:reserve`)).toBe(1);
    expect(calls.get(`${runId}:email`)).toBe(1);
    expect(calls.get(`${runId}:charge`)).toBe(2);
    expect(calls.get(`${runId}:fulfil`)).toBe(1);
    expect(await count(db.pool, 'SELECT 1 FROM cyclone.cyclone_runs WHERE id = $1', [runId])).toBe(
      1,
    );
  });

  it('retry --all reopens every discarded node of the run', async () => {
    const runId = await submitAndWait(['charge', 'email']);
    const before = await client.getRun(runId);
    expect(
      before.steps
        .filter((s) => s.state === 'discarded')
        .map((s) => s.node)
        .sort(),
    ).toEqual(['charge', 'email']);
    healed.add(runId);

    const r = await cli(['retry', runId, '--all', '--json']);
    expect(r.code).toBe(0);
    const out = JSON.parse(r.stdout) as { runId: string; reopened: string[] };
    expect(out.runId).toBe(runId);
    expect(out.reopened.sort()).toEqual(['charge', 'email']);

    const run = await client.waitForRun(runId, { timeoutMs: 20_000, pollMs: 20 });
    expect(run.state).toBe('completed');
    for (const node of ['charge', 'email']) {
      expect(run.steps.find((s) => s.node === node)).toMatchObject({
        state: 'completed',
        attempt: 2,
      });
    }
    expect(calls.get(`${runId}:fulfil`)).toBe(1);

    // Nothing left to retry: still a success, and it says so.
    const again = await cli(['retry', runId, '--all']);
    expect(again).toEqual({
      code: 0,
      stdout: `run ${runId} has no discarded or cancelled node; nothing to retry\n`,
      stderr: '',
    });
  });

  it('a node that is not discarded or cancelled, an unknown node and an unknown run are exit 1', async () => {
    const runId = await submitAndWait([]);
    const completedNode = await cli(['retry', runId, 'reserve']);
    expect(completedNode.code).toBe(1);
    expectOneLineError(
      completedNode,
      /node 'reserve' of run .* is completed; only a discarded or cancelled node can be retried/,
    );

    const unknownNode = await cli(['retry', runId, 'nope']);
    expect(unknownNode.code).toBe(1);
    expectOneLineError(unknownNode, new RegExp(`^cyclone: run ${runId} has no node 'nope'\\n$`));

    const unknownRun = await cli(['retry', '00000000-0000-4000-8000-000000000001', '--all']);
    expect(unknownRun.code).toBe(1);
    expectOneLineError(unknownRun, /run 00000000-0000-4000-8000-000000000001 not found/);
  });
});

describe('cyclone cancel', () => {
  it('cancels a running run; cancelling again says it already was; a completed run cannot be cancelled', async () => {
    const { runId } = await client.submit(Idle, {});
    const r = await cli(['cancel', runId]);
    expect(r).toEqual({
      code: 0,
      stdout: `cancelled run ${runId} (1 step cancelled)\n`,
      stderr: '',
    });
    const run = await client.getRun(runId);
    expect(run.state).toBe('cancelled');
    expect(run.steps.map((s) => s.state)).toEqual(['cancelled']);
    expect(await cli(['cancel', runId])).toEqual({
      code: 0,
      stdout: `run ${runId} was already cancelled; nothing to do\n`,
      stderr: '',
    });

    const done = await submitAndWait([]);
    const refused = await cli(['cancel', done]);
    expect(refused.code).toBe(1);
    expectOneLineError(refused, /is completed; it cannot be cancelled/);
    expect((await client.getRun(done)).state).toBe('completed');

    const missing = await cli(['cancel', 'not-a-run']);
    expect(missing.code).toBe(1);
    expectOneLineError(missing, /^cyclone: run not-a-run not found\n$/);
  });

  it('--json: whether it cancelled the run now, and how many steps', async () => {
    const { runId } = await client.submit(Idle, {});
    const first = await cli(['cancel', runId, '--json']);
    expect(first).toMatchObject({ code: 0, stderr: '' });
    expect(JSON.parse(first.stdout)).toEqual({ runId, cancelled: true, steps: 1 });
    const again = await cli(['cancel', runId, '--json']);
    expect(JSON.parse(again.stdout)).toEqual({ runId, cancelled: false, steps: 0 });
  });
});

describe('cyclone run: what a step waits on', () => {
  it('a running step shows its lease owner; a retryable one its next attempt and last error', async () => {
    const held = deferred();
    const running = deferred();
    const Slow = newWorkflow('cli_slow', {
      nodes: {
        hold: {
          action: newAction('cli_hold', async () => {
            running.resolve();
            await held.promise;
            return null;
          }),
        },
        flaky: {
          action: newAction(
            'cli_flaky',
            () => {
              throw new Error('provider unavailable');
            },
            { maxAttempts: 5, backoff: () => 3_600_000 },
          ),
        },
      },
    });
    const w = new Worker({ client, workflows: [Slow], pollIntervalMs: 50 });
    await w.start();
    try {
      const { runId } = await client.submit(Slow, {});
      await running.promise;
      await waitFor('flaky to fail once', async () => {
        const run = await client.getRun(runId);
        return run.steps.find((s) => s.node === 'flaky')?.state === 'retryable';
      });
      const r = await cli(['run', runId]);
      expect(r.code).toBe(0);
      const line = (node: string) => r.stdout.split('\n').find((l) => l.startsWith(node));
      expect(line('hold')).toMatch(
        new RegExp(`^hold\\s+running\\s+1/25\\s+-\\s+held by ${w.workerId}, lease until \\d{4}-`),
      );
      expect(line('flaky')).toMatch(
        /^flaky\s+retryable\s+1\/5\s+-\s+next attempt \d{4}-\S+ \(in 60m\); last error \[error\] provider unavailable$/,
      );
      await cli(['cancel', runId]);
    } finally {
      held.resolve();
      await w.stop({ graceMs: 5_000 });
    }
  });
});

describe('cyclone run: a step no live worker can claim', () => {
  it('says no live worker carries its workflow while it waits for one, and only then', async () => {
    const Lonely = newWorkflow('cli_lonely', {
      nodes: {
        first: { action: newAction('cli_lonely_first', () => null) },
        second: { action: newAction('cli_lonely_second', () => null), after: ['first'] },
      },
    });
    const { runId } = await client.submit(Lonely, {});
    const { runId: later } = await client.submit(Lonely, {}, { delayMs: 600_000 });
    const line = async (id: string, node: string) => {
      const r = await cli(['run', id]);
      expect(r.code).toBe(0);
      return r.stdout.split('\n').find((l) => l.startsWith(node));
    };
    const register = (id: string, seenAgo: string) =>
      db.pool.query(
        `INSERT INTO cyclone.cyclone_workers (worker_id, host, pid, concurrency, workflows, last_seen_at)
         VALUES ($1, 'h', 1, 1, $2, now() - $3::interval)`,
        [id, ['cli_other', 'cli_lonely'], seenAgo],
      );
    try {
      // No worker has ever carried it (the file's worker carries cli_order only).
      expect(await line(runId, 'first')).toMatch(
        /^first\s+available\s+0\/25\s+-\s+no live worker carries workflow 'cli_lonely'$/,
      );
      // A pending step and a step whose time has not come wait for something else first.
      expect(await line(runId, 'second')).toMatch(/^second\s+pending\s+0\/25\s+first\s+-$/);
      expect(await line(later, 'first')).toMatch(
        /^first\s+scheduled\s+0\/25\s+-\s+due \S+ \(in 10m\)$/,
      );
      // A worker that carried it but is not seen for 30 s is not live.
      await register('cli-gone', '30 seconds');
      expect(await line(runId, 'first')).toMatch(/no live worker carries workflow 'cli_lonely'$/);
      // A live one (registered, not running anything here) carries it: nothing to say.
      await register('cli-live', '0 seconds');
      expect(await line(runId, 'first')).toMatch(/^first\s+available\s+0\/25\s+-\s+-$/);
    } finally {
      await db.pool.query(
        "DELETE FROM cyclone.cyclone_workers WHERE worker_id IN ('cli-gone', 'cli-live')",
      );
      await cli(['cancel', runId]);
      await cli(['cancel', later]);
    }
  });
});

describe('cyclone runs: how many match', () => {
  it('a full page says "N of M"; a partial one says nothing more', async () => {
    const wf = 'cli_count';
    const Counted = newWorkflow(wf, {
      nodes: { a: { action: newAction('cli_count_a', () => 1) } },
    });
    await client.submitMany(Counted, [{}, {}, {}]);
    const page = await cli(['runs', '--workflow', wf, '--limit', '2']);
    expect(page.code).toBe(0);
    expect(page.stdout.trimEnd().split('\n').pop()).toBe(
      '2 of 3 runs, newest first (--limit up to 1000, --state and --workflow narrow it)',
    );
    const all = await cli(['runs', '--workflow', wf, '--limit', '3']);
    expect(all.stdout.trimEnd().split('\n')).toHaveLength(4); // header and 3 runs
    const json = await cli(['runs', '--workflow', wf, '--limit', '2', '--json']);
    expect(JSON.parse(json.stdout)).toHaveLength(2);
  });
});

describe('bad usage is exit 2', () => {
  const runId = '00000000-0000-4000-8000-000000000002';
  it.each([
    ['retry without node or --all', ['retry', runId], /retry needs a node or --all/],
    ['retry with both node and --all', ['retry', runId, 'charge', '--all'], /not both/],
    ['an unknown command', ['frobnicate'], /unknown command 'frobnicate'/],
    ['an unknown option', ['runs', '--colour'], /unknown option '--colour'/],
    ['a missing argument', ['run'], /missing required argument 'runId'/],
    ['a bad --limit', ['runs', '--limit', '0'], /--limit/],
    [
      'a bad --state',
      ['runs', '--state', 'done'],
      /Allowed choices are running, completed, failed, cancelled/,
    ],
    ['an extra argument', ['cancel', runId, 'extra'], /too many arguments/],
    [
      'a bad schema name',
      ['--schema', 'Bad-Name', 'runs'],
      /schema name "Bad-Name" is not a plain identifier/,
    ],
    [
      'a --database-url that is no URL',
      ['--database-url', 'notaurl', 'runs'],
      /^cyclone: invalid database URL \(--database-url\): expected postgres:\/\/user:password@host:5432\/database\n$/,
    ],
  ])('%s', async (_what, args, pattern) => {
    const r = await cli(args);
    expect(r.code).toBe(2);
    expect(r.stdout).toBe('');
    expectOneLineError(r, pattern);
  });

  it('a DATABASE_URL that is no PostgreSQL URL', async () => {
    const r = await cli(['runs'], { DATABASE_URL: 'http://example.com/db' });
    expect(r).toMatchObject({ code: 2, stdout: '' });
    expectOneLineError(r, /invalid database URL \(DATABASE_URL\): expected a postgres:\/\//);
  });

  it('bare `cyclone` prints the usage and is exit 2; --help and --version are exit 0', async () => {
    const bare = await cli([]);
    expect(bare.code).toBe(2);
    expect(bare.stderr).toMatch(/Usage: cyclone/);
    const help = await cli(['--help']);
    expect(help.code).toBe(0);
    expect(help.stdout).toMatch(/Commands:[\s\S]*migrate[\s\S]*runs[\s\S]*retry[\s\S]*cancel/);
    const version = await cli(['--version']);
    expect(version).toMatchObject({ code: 0, stdout: expect.stringMatching(/^\d+\.\d+\.\d+/) });
  });

  it('a database that cannot be reached is exit 1 with one line', async () => {
    let errText = '';
    const r = await main(['--database-url', 'postgres://root@127.0.0.1:1/nowhere', 'runs'], {
      stdout: { write: () => true },
      stderr: { write: (s: string) => (errText += s) },
      env: {},
    });
    expect(r).toBe(1);
    expect(errText).toMatch(
      /^cyclone: cannot connect to PostgreSQL: connect ECONNREFUSED 127\.0\.0\.1:1\n$/,
    );
  });
});

describe('the real program as a child process', () => {
  it('from source: run --json, an unknown run (1) and bad usage (2)', async () => {
    const runId = await submitAndWait([]);
    const ok = await fromSource(['run', runId, '--json']);
    expect(ok.stderr).toBe('');
    expect(ok.code).toBe(0);
    expect(JSON.parse(ok.stdout)).toMatchObject({ runId, state: 'completed' });

    const missing = await fromSource(['run', '00000000-0000-4000-8000-000000000003']);
    expect(missing.code).toBe(1);
    expectOneLineError(missing, /^cyclone: run 00000000-0000-4000-8000-000000000003 not found\n$/);

    const usage = await fromSource(['retry', runId]);
    expect(usage.code).toBe(2);
    expectOneLineError(usage, /retry needs a node or --all/);
  });

  it('from source: cyclone retry on a discarded node, as an operator would', async () => {
    const runId = await submitAndWait(['email']);
    healed.add(runId);
    const r = await fromSource(['retry', runId, 'email']);
    expect(r).toMatchObject({ code: 0, stdout: `reopened email of run ${runId}\n` });
    const run = await client.waitForRun(runId, { timeoutMs: 20_000, pollMs: 20 });
    expect(run.state).toBe('completed');
    expect(run.steps.find((s) => s.node === 'email')).toMatchObject({
      state: 'completed',
      attempt: 2,
    });
  });

  it('`pnpm cyclone` at the repository root: the exit code and the one line, nothing of pnpm', async () => {
    const pnpmCyclone = (args: string[]) =>
      new Promise<Result>((done, fail) => {
        const child = spawn('pnpm', ['cyclone', ...args], {
          cwd: resolve(PACKAGE_DIR, '../..'),
          env: { ...process.env, DATABASE_URL: db.url },
          stdio: ['ignore', 'pipe', 'pipe'],
        });
        let stdout = '';
        let stderr = '';
        child.stdout.on('data', (c) => (stdout += c));
        child.stderr.on('data', (c) => (stderr += c));
        child.on('error', fail);
        child.on('close', (code) => done({ code: code ?? -1, stdout, stderr }));
      });
    const missing = await pnpmCyclone(['run', '00000000-0000-4000-8000-000000000005']);
    expect(missing).toMatchObject({ code: 1, stdout: '' });
    expectOneLineError(missing, /^cyclone: run 00000000-0000-4000-8000-000000000005 not found\n$/);
    const usage = await pnpmCyclone(['--database-url', 'notaurl', 'runs']);
    expect(usage).toMatchObject({ code: 2, stdout: '' });
    expectOneLineError(usage, /^cyclone: invalid database URL \(--database-url\): /);
  });

  it.skipIf(!existsSync(resolve(PACKAGE_DIR, 'dist/cli.js')))(
    'the built bin (bin/cyclone.js → dist/cli.js): runs --json and an unknown run',
    async () => {
      const ok = await spawnCli(['bin/cyclone.js'], ['runs', '--limit', '2', '--json']);
      expect(ok.code).toBe(0);
      expect(JSON.parse(ok.stdout)).toHaveLength(2);
      const missing = await spawnCli(
        ['bin/cyclone.js'],
        ['cancel', '00000000-0000-4000-8000-000000000004'],
      );
      expect(missing.code).toBe(1);
      expectOneLineError(missing, /not found/);
    },
  );
});
