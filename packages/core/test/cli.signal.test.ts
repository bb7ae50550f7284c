/**
 * `cyclone signal <runId> <name> [--data JSON] [--json]`, in-process and as a child process,
 * against a worker running a workflow that waits for the signal: exit 0 with one line (accepted,
 * or already sent), 1 with one line for an unknown or finished run and a bad name or payload, 2
 * on bad usage (bad JSON in --data); nothing is written when it fails.
 */
import { waitFor } from '@cyclone/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { main } from '../src/cli.js';
import { Client, newAction, newWorkflow, Worker } from '../src/index.js';
import { type CliResult, spawnCli } from './support/cli-process.js';
import { createTestDb, type TestDb } from './support/db.js';

let db: TestDb;
let client: Client;
let worker: Worker;

const Ship = newAction('cli_sig_ship', async (ctx) => ({ shipped: ctx.upstream('approval') }));
const Approval = newWorkflow('cli_sig_approval', {
  nodes: {
    approval: { waitFor: 'approved', timeoutMs: 60_000 },
    ship: { action: Ship, after: ['approval'] },
  },
});

/** The CLI in-process on the test database. */
async function cli(...args: string[]): Promise<CliResult> {
  let stdout = '';
  let stderr = '';
  const code = await main(['--database-url', db.url, ...args], {
    stdout: { write: (s: string) => (stdout += s) },
    stderr: { write: (s: string) => (stderr += s) },
    env: {},
  });
  return { code, stdout, stderr };
}

/** The CLI from source as a child process (`tsx src/cli.ts`). */
const fromSource = (args: string[]) =>
  spawnCli(db.url, ['--conditions=@cyclone/source', '--import', 'tsx', 'src/cli.ts'], args);

/** Exit 1 (or `code`) with exactly one line on stderr, starting `cyclone: `, and no stdout. */
function expectFailure(r: CliResult, pattern: RegExp, code = 1): void {
  expect(r.code).toBe(code);
  expect(r.stdout).toBe('');
  expect(r.stderr).toMatch(/^cyclone: [^\n]+\n$/);
  expect(r.stderr).toMatch(pattern);
}

async function signalsOf(runId: string): Promise<{ name: string; payload: unknown }[]> {
  const { rows } = await db.pool.query(
    'SELECT name, payload FROM cyclone.cyclone_signals WHERE run_id = $1 ORDER BY name',
    [runId],
  );
  return rows;
}

const waitingRun = async () => (await client.submit(Approval, {})).runId;

beforeAll(async () => {
  db = await createTestDb();
  client = new Client({ connectionString: db.url, poolSize: 2 });
  worker = new Worker({ client, workflows: [Approval], concurrency: 2, pollIntervalMs: 50 });
  await worker.start();
});

afterAll(async () => {
  await worker?.stop({ graceMs: 2_000 });
  await client?.close();
  await db?.drop();
});

describe('cyclone signal', () => {
  it('delivers --data to the wait node; a second signal of the name changes nothing', async () => {
    const runId = await waitingRun();
    const r = await cli('signal', runId, 'approved', '--data', '{"by":"alice"}');
    expect(r).toEqual({
      code: 0,
      stdout: `signal approved accepted for run ${runId}\n`,
      stderr: '',
    });
    const run = await client.waitForRun(runId, { timeoutMs: 20_000, pollMs: 20 });
    expect(run.state).toBe('completed');
    expect(run.steps.find((s) => s.node === 'approval')?.output).toEqual({ by: 'alice' });
    expect(run.steps.find((s) => s.node === 'ship')?.output).toEqual({ shipped: { by: 'alice' } });

    // The run is finished now: a late signal is refused, not silently dropped.
    const late = await cli('signal', runId, 'approved', '--data', '{"by":"bob"}');
    expectFailure(late, new RegExp(`run ${runId} is completed; a signal is only taken`));
    expect(await signalsOf(runId)).toEqual([{ name: 'approved', payload: { by: 'alice' } }]);
  });

  it('says when the signal was already sent; --json answers { runId, signal, accepted }', async () => {
    // No worker runs this run's workflow, so it stays running while both signals are sent.
    const Idle = newWorkflow('cli_sig_idle', {
      nodes: { approval: { waitFor: 'approved' } },
    });
    const { runId } = await client.submit(Idle, {});
    const first = await cli('signal', runId, 'approved', '--json');
    expect(first).toMatchObject({ code: 0, stderr: '' });
    expect(JSON.parse(first.stdout)).toEqual({
      runId,
      signal: 'approved',
      accepted: true,
      waitingNodes: ['approval'],
    });

    const again = await cli('signal', runId, 'approved', '--data', '"again"');
    expect(again).toEqual({
      code: 0,
      stdout: `signal approved for run ${runId} was already sent; this one changed nothing\n`,
      stderr: '',
    });
    const againJson = await cli('signal', runId, 'approved', '--data', '1', '--json');
    expect(JSON.parse(againJson.stdout)).toEqual({
      runId,
      signal: 'approved',
      accepted: false,
      waitingNodes: ['approval'],
    });
    // Without --data the payload is null; the first signal stands.
    expect(await signalsOf(runId)).toEqual([{ name: 'approved', payload: null }]);

    // Every JSON value is a payload; a name with spaces is quoted so the answer stays one line.
    const odd = await cli('signal', runId, 'two words\nand a line', '--data', '[1,"x",null]');
    expect(odd).toEqual({
      code: 0,
      stdout: `signal "two words\\nand a line" accepted for run ${runId} (no node of run ${runId} waits for signal "two words\\nand a line"; stored anyway)\n`,
      stderr: '',
    });
    await client.cancel(runId);
  });

  it('run shows the signal a wait node waits for; a signal no node waits for is stored, and said so', async () => {
    const runId = await waitingRun();
    // The worker claims the wait node, which parks until its signal or its deadline (60 s).
    const parked = await waitFor('the wait node parked', async () => {
      const run = await client.getRun(runId);
      const a = run.steps.find((s) => s.node === 'approval');
      return a?.state === 'scheduled' && a.startedAt !== null ? a : undefined;
    });
    expect(parked).toMatchObject({ action: '$wait', waitFor: 'approved' });
    expect(parked.waitDeadline).toBeInstanceOf(Date);
    const line = (out: string, node: string) =>
      out.split('\n').find((l) => l.startsWith(`${node} `)) ?? '';
    const table = await cli('run', runId);
    expect(line(table.stdout, 'approval')).toMatch(
      /scheduled +1\/26 +- +waiting for signal 'approved' until \d{4}-\d\d-\d\dT[\d:.]+Z \(in \d+s\)$/,
    );
    expect(line(table.stdout, 'ship')).toMatch(/pending +0\/\d+ +approval +-$/);
    const json = JSON.parse((await cli('run', runId, '--json')).stdout);
    expect(json.steps[0]).toMatchObject({ node: 'approval', waitFor: 'approved' });
    expect(json.steps[0].waitDeadline).toBe(parked.waitDeadline?.toISOString());
    expect(json.steps[1]).toMatchObject({ node: 'ship', waitFor: null, waitDeadline: null });

    // A misspelt name: stored (signals are, whatever the run's progress), and the line says so.
    const typo = await cli('signal', runId, 'approvd');
    expect(typo).toEqual({
      code: 0,
      stdout: `signal approvd accepted for run ${runId} (no node of run ${runId} waits for signal "approvd"; stored anyway)\n`,
      stderr: '',
    });
    const typoJson = await cli('signal', runId, 'approvd2', '--json');
    expect(JSON.parse(typoJson.stdout)).toEqual({
      runId,
      signal: 'approvd2',
      accepted: true,
      waitingNodes: [],
    });
    expect((await client.getRun(runId)).state).toBe('running');
    expect(await client.signal(runId, 'approved')).toEqual({
      accepted: true,
      waitingNodes: ['approval'],
    });
    await client.waitForRun(runId, { timeoutMs: 20_000, pollMs: 20 });

    // Not claimed (no worker runs this workflow, and the DETAIL says so first) and without
    // timeoutMs: no "until".
    const Idle = newWorkflow('cli_sig_idle_run', { nodes: { approval: { waitFor: 'approved' } } });
    const idle = (await client.submit(Idle, {})).runId;
    expect(line((await cli('run', idle)).stdout, 'approval')).toMatch(
      /available +0\/25 +- +no live worker carries workflow 'cli_sig_idle_run'; waits for signal 'approved'$/,
    );
    await client.cancel(idle);
    // Before it is reached: its upstream node has not run, or its delayed run has not started.
    const Later = newWorkflow('cli_sig_idle_later', {
      nodes: { first: { action: Ship }, approval: { waitFor: 'approved', after: ['first'] } },
    });
    const later = (await client.submit(Later, {})).runId;
    expect(line((await cli('run', later)).stdout, 'approval')).toMatch(
      /pending +0\/25 +first +will wait for signal 'approved'$/,
    );
    const delayed = (await client.submit(Idle, {}, { delayMs: 600_000 })).runId;
    expect(line((await cli('run', delayed)).stdout, 'approval')).toMatch(
      /scheduled +0\/25 +- +due \S+Z \(in 10m\), then waits for signal 'approved'$/,
    );
    await client.cancel(later);
    await client.cancel(delayed);
  });

  it('exit 1 with one line: unknown run, finished run, bad name, bad payload; nothing written', async () => {
    const unknown = '00000000-0000-4000-8000-000000000042';
    expectFailure(await cli('signal', unknown, 'approved'), new RegExp(`run ${unknown} not found`));
    expectFailure(await cli('signal', 'not-a-uuid', 'approved'), /run not-a-uuid not found/);

    const cancelled = await waitingRun();
    await client.cancel(cancelled);
    expectFailure(
      await cli('signal', cancelled, 'approved'),
      new RegExp(`run ${cancelled} is cancelled; a signal is only taken by a running run`),
    );

    const runId = await waitingRun();
    expectFailure(await cli('signal', runId, ''), /a signal name is 1 to 200 characters/);
    expectFailure(await cli('signal', runId, 'x'.repeat(201)), /a signal name is 1 to 200/);
    expectFailure(
      await cli('signal', runId, 'approved', '--data', '"\\u0000"'),
      /signal "approved" for run .*: .*NUL character/,
    );
    const big = JSON.stringify({ blob: 'x'.repeat(1024 * 1024) });
    expectFailure(
      await cli('signal', runId, 'approved', '--data', big),
      /signal "approved" for run .*: the signal payload .*bytes/,
    );
    expect(await signalsOf(runId)).toEqual([]);
    expect((await client.getRun(runId)).state).toBe('running');
    await client.cancel(runId);
  });

  it('exit 2 on bad usage: bad JSON in --data, a missing name, an extra argument', async () => {
    const runId = await waitingRun();
    const badJson = await cli('signal', runId, 'approved', '--data', '{by: alice}');
    expectFailure(badJson, /--data <json>.*expected JSON/, 2);
    expectFailure(await cli('signal', runId, 'approved', '--data'), /argument missing/, 2);
    expectFailure(await cli('signal', runId), /missing required argument 'name'/, 2);
    expectFailure(await cli('signal', runId, 'approved', 'extra'), /too many arguments/, 2);
    expect(await signalsOf(runId)).toEqual([]);
    await client.cancel(runId);
  });

  it('as a child process from source: accepted (0), unknown run (1), bad JSON (2)', async () => {
    const runId = await waitingRun();
    const ok = await fromSource(['signal', runId, 'approved', '--data', '{"by":"ops"}']);
    expect(ok).toEqual({
      code: 0,
      stdout: `signal approved accepted for run ${runId}\n`,
      stderr: '',
    });
    const run = await client.waitForRun(runId, { timeoutMs: 20_000, pollMs: 20 });
    expect(run.steps.find((s) => s.node === 'approval')?.output).toEqual({ by: 'ops' });

    const missing = await fromSource(['signal', '00000000-0000-4000-8000-000000000043', 'x']);
    expectFailure(missing, /^cyclone: run 00000000-0000-4000-8000-000000000043 not found\n$/);
    const usage = await fromSource(['signal', runId, 'approved', '--data', 'yes']);
    expectFailure(usage, /expected JSON/, 2);
  });
});
