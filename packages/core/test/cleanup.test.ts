import { existsSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { count } from '@cyclone/testkit';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { main } from '../src/cli.js';
import { parseDuration } from '../src/cli-format.js';
import { Client, type DeleteFinishedRunsOptions } from '../src/client.js';
import { newAction, newWorkflow } from '../src/definitions.js';
import { ConfigError } from '../src/errors.js';
import { deleteFinishedRunsSql } from '../src/sql/runs.js';
import { Worker } from '../src/worker.js';
import { spawnCli } from './support/cli-process.js';
import { createTestDb, type TestDb } from './support/db.js';
import { captureLogger } from './support/logger.js';

const PACKAGE_DIR = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const DAY = 86_400_000;

let db: TestDb;
let client: Client;
const log = captureLogger();

beforeAll(async () => {
  db = await createTestDb();
  client = new Client({ connectionString: db.url, poolSize: 4, logger: log.logger });
});

afterAll(async () => {
  await client?.close();
  await db?.drop();
});

beforeEach(async () => {
  await db.pool.query('TRUNCATE cyclone.cyclone_runs CASCADE');
  log.entries.length = 0;
});

type State = 'running' | 'completed' | 'failed' | 'cancelled';

/**
 * Inserts `n` runs of `workflow` in `state`, each with two steps, finished `agoMs` ago (the i-th
 * one i ms earlier still, so the order by completed_at is the insertion order reversed); a
 * running run gets `completed_at` only when `agoMs` is given with `forceCompletedAt`.
 * @returns the run ids, oldest first.
 */
async function seed(
  n: number,
  state: State,
  agoMs: number,
  workflow = 'wf',
  forceCompletedAt = false,
): Promise<string[]> {
  const { rows } = await db.pool.query<{ id: string }>(
    `WITH runs AS (
       INSERT INTO cyclone.cyclone_runs
         (id, workflow, state, input, input_hash, steps_remaining, steps_active, completed_at)
       SELECT gen_random_uuid(), $1, $2, '{}', 'h', 0, 0,
              CASE WHEN $2 = 'running' AND NOT $5 THEN NULL
                   ELSE now() - make_interval(secs => ($3::double precision + i) / 1000) END
       FROM generate_series(1, $4::int) AS i
       RETURNING id, completed_at
     ), steps AS (
       INSERT INTO cyclone.cyclone_steps
         (run_id, node, workflow, action, state, max_attempts, deps_remaining)
       SELECT runs.id, node, $1, 'act', CASE WHEN $2 = 'running' THEN 'available' ELSE 'completed' END, 1, 0
       FROM runs, unnest(ARRAY['a', 'b']) AS node
     )
     SELECT id FROM runs ORDER BY completed_at NULLS LAST`,
    [workflow, state, agoMs, n, forceCompletedAt],
  );
  return rows.map((r) => r.id);
}

const runs = (where = 'true') =>
  count(db.pool, `SELECT 1 FROM cyclone.cyclone_runs WHERE ${where}`);
const steps = () => count(db.pool, 'SELECT 1 FROM cyclone.cyclone_steps');
/** The sizes of the batches logged by the client since the last reset. */
const batches = () =>
  log.entries
    .filter((e) => e.msg === 'deleted a batch of finished runs')
    .map((e) => e.data.deleted);

describe('deleteFinishedRuns', () => {
  it('deletes old completed and cancelled runs only, with their steps; keeps running, failed and recent ones', async () => {
    const oldCompleted = await seed(3, 'completed', 10 * DAY);
    const oldCancelled = await seed(2, 'cancelled', 10 * DAY);
    await seed(2, 'failed', 10 * DAY);
    await seed(2, 'running', 0);
    // A running run never goes, even with a stale completed_at (as a retried run had before the
    // retry cleared it) and every finished state asked for.
    await seed(1, 'running', 10 * DAY, 'wf', true);
    await seed(2, 'completed', 1 * DAY);
    expect(await runs()).toBe(12);
    expect(await steps()).toBe(24);

    expect(await client.deleteFinishedRuns({ olderThanMs: 7 * DAY })).toEqual({ deleted: 5 });
    expect(await runs(`id = ANY('{${[...oldCompleted, ...oldCancelled].join(',')}}')`)).toBe(0);
    expect(await runs()).toBe(7);
    expect(await steps()).toBe(14);
    expect(await runs("state = 'failed'")).toBe(2);

    // Failed runs on request; running runs never.
    expect(
      await client.deleteFinishedRuns({
        olderThanMs: 7 * DAY,
        states: ['completed', 'failed', 'cancelled'],
      }),
    ).toEqual({ deleted: 2 });
    expect(await runs("state = 'running'")).toBe(3);
    expect(await runs("state = 'completed'")).toBe(2);
    // Age 0: every finished run of the states, recent ones included; running ones still stay.
    expect(
      await client.deleteFinishedRuns({
        olderThanMs: 0,
        states: ['completed', 'failed', 'cancelled'],
      }),
    ).toEqual({ deleted: 2 });
    expect(await runs()).toBe(3);
    expect(await runs("state = 'running'")).toBe(3);
    expect(await steps()).toBe(6);
  });

  it('runs finished by the engine go with their steps', async () => {
    const echo = newAction('cleanup_echo', async (_ctx, input: { v: number }) => input);
    const wf = newWorkflow<{ v: number }>('cleanup_echo', {
      nodes: { a: { action: echo }, b: { action: echo, after: ['a'] } },
    });
    const worker = new Worker({ client, workflows: [wf], concurrency: 4, pollIntervalMs: 20 });
    await worker.start();
    const ids: string[] = [];
    try {
      for (let i = 0; i < 5; i++) ids.push((await client.submit(wf, { v: i })).runId);
      for (const id of ids) await client.waitForRun(id, { timeoutMs: 20_000, pollMs: 20 });
    } finally {
      await worker.stop({ graceMs: 5_000 });
    }
    // Submitted once the worker has stopped: a running worker could finish it before the cancel.
    const cancelled = (await client.submit(wf, { v: 99 })).runId;
    await client.cancel(cancelled);
    ids.push(cancelled);
    // Just finished: not old enough.
    expect(await client.deleteFinishedRuns({ olderThanMs: 60_000 })).toEqual({ deleted: 0 });
    expect(await steps()).toBe(12);
    await db.pool.query(
      "UPDATE cyclone.cyclone_runs SET completed_at = completed_at - interval '2 minutes'",
    );
    expect(await client.deleteFinishedRuns({ olderThanMs: 60_000 })).toEqual({ deleted: 6 });
    expect(await runs()).toBe(0);
    expect(await steps()).toBe(0);
  });

  it('deletes in bounded batches until one comes back short: 2,500 runs in batches of 1,000', async () => {
    await seed(2500, 'completed', 10 * DAY);
    expect(await client.deleteFinishedRuns({ olderThanMs: DAY })).toEqual({ deleted: 2500 });
    expect(batches()).toEqual([1000, 1000, 500]);
    expect(await runs()).toBe(0);
    expect(await steps()).toBe(0);

    // An exact multiple takes one more, empty, batch to know it is done.
    log.entries.length = 0;
    await seed(20, 'cancelled', 10 * DAY);
    expect(await client.deleteFinishedRuns({ olderThanMs: DAY, batchSize: 10 })).toEqual({
      deleted: 20,
    });
    expect(batches()).toEqual([10, 10, 0]);
  });

  it('stops at maxRuns, oldest first', async () => {
    const ids = await seed(2500, 'completed', 10 * DAY);
    expect(
      await client.deleteFinishedRuns({ olderThanMs: DAY, batchSize: 1000, maxRuns: 1500 }),
    ).toEqual({ deleted: 1500 });
    // The last batch asks only for what is left of maxRuns.
    expect(batches()).toEqual([1000, 500]);
    // The 1,000 newest remain.
    const { rows } = await db.pool.query<{ id: string }>('SELECT id FROM cyclone.cyclone_runs');
    expect(new Set(rows.map((r) => r.id))).toEqual(new Set(ids.slice(1500)));

    log.entries.length = 0;
    expect(await client.deleteFinishedRuns({ olderThanMs: DAY, maxRuns: 1 })).toEqual({
      deleted: 1,
    });
    expect(batches()).toEqual([1]);
    expect(await runs()).toBe(999);
  });

  it('filters by workflow', async () => {
    await seed(3, 'completed', 10 * DAY, 'orders');
    await seed(4, 'completed', 10 * DAY, 'emails');
    expect(await client.deleteFinishedRuns({ olderThanMs: DAY, workflow: 'orders' })).toEqual({
      deleted: 3,
    });
    expect(await runs("workflow = 'emails'")).toBe(4);
    expect(await client.deleteFinishedRuns({ olderThanMs: DAY, workflow: 'nope' })).toEqual({
      deleted: 0,
    });
    // A name PostgreSQL cannot store matches no run (no database error).
    expect(await client.deleteFinishedRuns({ olderThanMs: DAY, workflow: 'a\u0000b' })).toEqual({
      deleted: 0,
    });
    expect(await runs()).toBe(4);
  });

  it('skips a run locked right now (an operator retry in progress) without waiting for it', async () => {
    const [locked, ...others] = await seed(5, 'completed', 10 * DAY);
    const holder = await db.pool.connect();
    try {
      await holder.query('BEGIN');
      await holder.query('SELECT 1 FROM cyclone.cyclone_runs WHERE id = $1 FOR UPDATE', [locked]);
      const started = Date.now();
      expect(await client.deleteFinishedRuns({ olderThanMs: DAY, batchSize: 2 })).toEqual({
        deleted: 4,
      });
      expect(Date.now() - started).toBeLessThan(5_000);
      // The locking transaction reopens the run (what `retry` does): it must survive.
      await holder.query(
        "UPDATE cyclone.cyclone_runs SET state = 'running', completed_at = NULL WHERE id = $1",
        [locked],
      );
      await holder.query('COMMIT');
    } finally {
      holder.release();
    }
    expect(others).toHaveLength(4);
    expect(await client.deleteFinishedRuns({ olderThanMs: 0 })).toEqual({ deleted: 0 });
    expect(await runs(`id = '${locked}' AND state = 'running'`)).toBe(1);
  });

  it('bad options are a ConfigError and delete nothing', async () => {
    await seed(5, 'completed', 10 * DAY);
    const bad: unknown[] = [
      undefined,
      null,
      {},
      { olderThanMs: -1 },
      { olderThanMs: Number.NaN },
      { olderThanMs: Number.POSITIVE_INFINITY },
      { olderThanMs: 1.5 },
      { olderThanMs: '1000' },
      { olderThanMs: 2 ** 53 },
      { olderThanMs: DAY, batchSize: 0 },
      { olderThanMs: DAY, batchSize: -5 },
      { olderThanMs: DAY, batchSize: 2.5 },
      { olderThanMs: DAY, batchSize: Number.NaN },
      { olderThanMs: DAY, batchSize: 100_001 },
      { olderThanMs: DAY, maxRuns: 0 },
      { olderThanMs: DAY, maxRuns: -1 },
      { olderThanMs: DAY, maxRuns: 1.5 },
      { olderThanMs: DAY, maxRuns: Number.NaN },
      { olderThanMs: DAY, states: [] },
      { olderThanMs: DAY, states: ['running'] },
      { olderThanMs: DAY, states: ['completed', 'bogus'] },
      { olderThanMs: DAY, states: 'completed' },
      // biome-ignore lint/suspicious/noSparseArray: a hole is a bad state too
      { olderThanMs: DAY, states: [, 'completed'] },
      { olderThanMs: DAY, workflow: 5 },
    ];
    for (const options of bad) {
      const call = client.deleteFinishedRuns(options as DeleteFinishedRunsOptions);
      await expect(call, JSON.stringify(options)).rejects.toBeInstanceOf(ConfigError);
      await expect(call).rejects.toMatchObject({ code: 'CONFIG' });
    }
    await expect(client.deleteFinishedRuns({ olderThanMs: -1 })).rejects.toThrow(
      /olderThanMs must be an integer ≥ 0, got -1/,
    );
    await expect(
      client.deleteFinishedRuns({ olderThanMs: 1, states: ['running' as 'completed'] }),
    ).rejects.toThrow(/a running run is never deleted/);
    expect(await runs()).toBe(5);
    expect(batches()).toEqual([]);
  });

  it('a huge age is fine (no timestamp overflow) and deletes nothing', async () => {
    await seed(2, 'completed', 10 * DAY);
    expect(await client.deleteFinishedRuns({ olderThanMs: Number.MAX_SAFE_INTEGER })).toEqual({
      deleted: 0,
    });
    expect(await runs()).toBe(2);
  });

  it('reads the partial index cyclone_runs_finished, also as a generic plan', async () => {
    await seed(5000, 'completed', 10 * DAY);
    await seed(200, 'running', 0);
    await db.pool.query('ANALYZE cyclone.cyclone_runs');
    const c = await db.pool.connect();
    try {
      await c.query('BEGIN');
      await c.query('SET LOCAL enable_seqscan = off');
      await c.query("SET LOCAL plan_cache_mode = 'force_generic_plan'");
      await c.query(`PREPARE cleanup_plan AS ${deleteFinishedRunsSql('cyclone')}`);
      const { rows } = await c.query<{ 'QUERY PLAN': string }>(
        `EXPLAIN EXECUTE cleanup_plan('{completed,cancelled}', ${DAY}, NULL, 1000)`,
      );
      const plan = rows.map((r) => r['QUERY PLAN']).join('\n');
      expect(plan).toMatch(/Index Scan using cyclone_runs_finished/);
      expect(plan).not.toMatch(/Seq Scan/);
    } finally {
      await c.query('ROLLBACK').catch(() => {});
      c.release();
    }
  });
});

interface Result {
  code: number;
  stdout: string;
  stderr: string;
}

/** The CLI in-process, on the test database. */
async function cli(args: string[]): Promise<Result> {
  let stdout = '';
  let stderr = '';
  const code = await main(['--database-url', db.url, ...args], {
    stdout: { write: (s: string) => (stdout += s) },
    stderr: { write: (s: string) => (stderr += s) },
    env: {},
  });
  return { code, stdout, stderr };
}

/** The built bin as a child process, cwd packages/core. */
const bin = (args: string[]): Promise<Result> => spawnCli(db.url, ['bin/cyclone.js'], args);

/** Exactly one line on stderr, starting `cyclone: `, and no stack trace. */
function expectOneLineError(r: Result, pattern: RegExp): void {
  expect(r.stderr).toMatch(/^cyclone: [^\n]+\n$/);
  expect(r.stderr).toMatch(pattern);
  expect(r.stderr).not.toMatch(/\n\s+at /);
}

describe('cyclone cleanup', () => {
  it('parses durations strictly', () => {
    expect(parseDuration('7d')).toBe(7 * DAY);
    expect(parseDuration('12h')).toBe(12 * 3_600_000);
    expect(parseDuration('30m')).toBe(30 * 60_000);
    expect(parseDuration('45s')).toBe(45_000);
    expect(parseDuration('500ms')).toBe(500);
    expect(parseDuration('0s')).toBe(0);
    for (const bad of [
      '',
      '7',
      '7 d',
      ' 7d',
      '7D',
      '1.5h',
      '-1d',
      '7x',
      'd',
      '1d2h',
      '99999999999999d',
    ])
      expect(() => parseDuration(bad), bad).toThrow();
  });

  it('deletes old finished runs and prints what it did, as text and JSON', async () => {
    await seed(3, 'completed', 10 * DAY);
    await seed(2, 'failed', 10 * DAY);
    await seed(1, 'completed', 1_000);
    const text = await cli(['cleanup', '--older-than', '7d']);
    expect(text).toEqual({
      code: 0,
      stdout: 'deleted 3 completed/cancelled runs finished more than 7d ago\n',
      stderr: '',
    });
    const json = await cli([
      'cleanup',
      '--older-than',
      '12h',
      '--state',
      'failed,completed',
      '--batch-size',
      '1',
      '--max-runs',
      '1',
      '--workflow',
      'wf',
      '--json',
    ]);
    expect(json.code).toBe(0);
    expect(JSON.parse(json.stdout)).toEqual({
      deleted: 1,
      olderThanMs: 12 * 3_600_000,
      states: ['failed', 'completed'],
      workflow: 'wf',
    });
    expect(await runs("state = 'failed'")).toBe(1);
    expect(await runs("state = 'completed'")).toBe(1); // the recent one
  });

  it('bad usage exits 2 with one line and deletes nothing', async () => {
    await seed(2, 'completed', 10 * DAY);
    const cases: [string[], RegExp][] = [
      [['cleanup'], /required option '--older-than <duration>' not specified/],
      [['cleanup', '--older-than', '7'], /whole number and a unit/],
      [['cleanup', '--older-than', '7d', '--state', 'running'], /never deleted/],
      [['cleanup', '--older-than', '7d', '--state', 'completed,nope'], /comma-separated list/],
      [['cleanup', '--older-than', '7d', '--batch-size', '0'], /integer from 1 to 100000/],
      [['cleanup', '--older-than', '7d', '--batch-size', '2.5'], /integer from 1 to 100000/],
      [['cleanup', '--older-than', '7d', '--max-runs', '-1'], /--max-runs/],
    ];
    for (const [args, pattern] of cases) {
      const r = await cli(args);
      expect(r.code, args.join(' ')).toBe(2);
      expect(r.stdout).toBe('');
      expectOneLineError(r, pattern);
    }
    expect(await runs()).toBe(2);
  });

  it.skipIf(!existsSync(resolve(PACKAGE_DIR, 'dist/cli.js')))(
    'the built bin: cleanup --json, and a bad duration exits 2',
    async () => {
      await seed(4, 'cancelled', 2 * DAY);
      await seed(1, 'running', 0);
      const ok = await bin(['cleanup', '--older-than', '1d', '--batch-size', '3', '--json']);
      expect(ok).toMatchObject({ code: 0, stderr: '' });
      expect(JSON.parse(ok.stdout)).toMatchObject({ deleted: 4 });
      const bad = await bin(['cleanup', '--older-than', '7days']);
      expect(bad.code).toBe(2);
      expectOneLineError(bad, /'--older-than <duration>' argument '7days' is invalid/);
      expect(await runs()).toBe(1);
    },
  );
});
