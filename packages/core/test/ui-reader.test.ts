/**
 * The operator UI's reader on a real database: keyset pages of runs in both directions with
 * ties on created_at (every run exactly once, in order), filters, the go-to lookup, a run's
 * steps with their upstream nodes, a step's errors (newest first) and output (a number beyond
 * 2^53 intact in the JSON text; a preview cut), capped overview counts, workflows, health with
 * lease owners and expired leases; every read is read-only and bounded by its statement timeout.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, NonRetryableError, newAction, newWorkflow, Worker } from '../src/index.js';
import { claimSteps } from '../src/sql/claim.js';
import {
  BadQueryError,
  createUiReader,
  QueryTimeoutError,
  type UiReader,
  type UiRunsFilter,
} from '../src/ui-reader.js';
import { createTestDb, type TestDb } from './support/db.js';

const ok = newAction('uir_ok', async (ctx) => ({ node: ctx.node }));
const refuses = newAction(
  'uir_refuses',
  async (ctx) => {
    throw new NonRetryableError(`refused at attempt ${ctx.attempt}`);
  },
  { maxAttempts: 1 },
);
const Diamond = newWorkflow('uir_diamond', {
  nodes: {
    a: { action: ok },
    b: { action: ok, after: ['a'] },
    c: { action: ok, after: ['a'] },
    d: { action: ok, after: ['b', 'c'] },
  },
});
const Broken = newWorkflow('uir_broken', { nodes: { x: { action: refuses } } });
/** Never run by a worker here: its runs stay `running`, with a claimable step. */
const Idle = newWorkflow('uir_idle', { nodes: { only: { action: ok } } });

let db: TestDb;
let client: Client;
let reader: UiReader;
let diamondRun: string;
let brokenRun: string;
/** The 12 runs paged below, newest first as the list orders them. */
let paged: string[];

beforeAll(async () => {
  db = await createTestDb();
  client = new Client({ connectionString: db.url, poolSize: 3 });
  reader = createUiReader({ client, max: 2 });
  diamondRun = (await client.submitOnce(Diamond, 'order-42', {})).runId;
  brokenRun = (await client.submit(Broken, {})).runId;
  const worker = new Worker({ client, workflows: [Diamond, Broken], pollIntervalMs: 50 });
  await worker.start();
  try {
    await client.waitForRun(diamondRun, { timeoutMs: 30_000 });
    await client.waitForRun(brokenRun, { timeoutMs: 30_000 });
  } finally {
    await worker.stop();
  }
  // 12 idle runs: 7 share one created_at (ties broken by id), 5 are a minute apart after them.
  const ids: string[] = [];
  for (let i = 0; i < 12; i++) ids.push((await client.submit(Idle, { i })).runId);
  await db.pool.query(
    `UPDATE cyclone.cyclone_runs SET created_at = CASE
        WHEN ord <= 7 THEN timestamptz '2026-01-01 00:00:00.123456+00'
        ELSE timestamptz '2026-01-01 00:00:00+00' + (ord - 7) * interval '1 minute' END
     FROM unnest($1::uuid[]) WITH ORDINALITY AS u(id, ord) WHERE cyclone_runs.id = u.id`,
    [ids],
  );
  const { rows } = await db.pool.query(
    `SELECT id FROM cyclone.cyclone_runs WHERE workflow = 'uir_idle'
     ORDER BY created_at DESC, id DESC`,
  );
  paged = rows.map((r) => r.id);
  // The two finished runs are newer than these (created now).
});

afterAll(async () => {
  await reader?.close();
  await client?.close();
  await db?.drop();
});

/** Every page from the newest to the oldest, then back, with `limit` runs per page. */
async function walk(filter: UiRunsFilter, limit: number) {
  const down: string[][] = [];
  let page = await reader.listRuns({ ...filter, limit });
  expect(page.prev).toBeNull();
  down.push(page.items.map((r) => r.runId));
  while (page.next) {
    page = await reader.listRuns({ ...filter, limit, cursor: page.next, dir: 'older' });
    down.push(page.items.map((r) => r.runId));
    expect(page.prev).not.toBeNull();
  }
  const up: string[][] = [];
  let cursor = page.prev;
  while (cursor) {
    const p = await reader.listRuns({ ...filter, limit, cursor, dir: 'newer' });
    up.unshift(p.items.map((r) => r.runId));
    cursor = p.prev;
  }
  return { down, up };
}

describe('runs pages', () => {
  it('pages newest first by (created_at, id), each run once, and back again', async () => {
    const { down, up } = await walk({ workflow: 'uir_idle' }, 3);
    expect(down.flat()).toEqual(paged);
    expect(down.map((p) => p.length)).toEqual([3, 3, 3, 3]);
    // Back from the oldest page: the same pages, newest first, without the page we came from.
    expect(up).toEqual(down.slice(0, -1));
    const odd = await walk({ workflow: 'uir_idle' }, 5);
    expect(odd.down.flat()).toEqual(paged);
    expect(odd.down.map((p) => p.length)).toEqual([5, 5, 2]);
  });

  it('filters by state, workflow and creation time, alone or together', async () => {
    const all = (await walk({}, 4)).down.flat();
    expect(all).toHaveLength(14);
    expect(all.slice(0, 2).sort()).toEqual([diamondRun, brokenRun].sort());
    const failed = await reader.listRuns({ state: 'failed' });
    expect(failed.items.map((r) => [r.runId, r.workflow, r.state])).toEqual([
      [brokenRun, 'uir_broken', 'failed'],
    ]);
    const completed = await reader.listRuns({ state: 'completed', workflow: 'uir_diamond' });
    expect(completed.items).toHaveLength(1);
    expect(completed.items[0]).toMatchObject({
      runId: diamondRun,
      submitKey: 'order-42',
      stepsRemaining: 0,
    });
    expect(completed.items[0]?.completedAt).toMatch(/Z$/);
    expect((await reader.listRuns({ state: 'running' })).items).toHaveLength(12);
    expect((await reader.listRuns({ state: 'cancelled' })).items).toEqual([]);
    const window = await walk(
      { from: '2026-01-01T00:00:00.123Z', to: '2026-01-01T00:03:00Z', state: 'running' },
      2,
    );
    // The 7 tied runs (at .123456, after .123) and the runs at +1 and +2 minutes.
    expect(window.down.flat()).toEqual(paged.slice(3));
  });

  it('refuses a bad state, limit, time or cursor', async () => {
    await expect(reader.listRuns({ state: 'nope' as never })).rejects.toThrow(BadQueryError);
    await expect(reader.listRuns({ limit: 201 })).rejects.toThrow(BadQueryError);
    await expect(reader.listRuns({ from: 'yesterday' })).rejects.toThrow(BadQueryError);
    await expect(reader.listRuns({ cursor: 'bm90IGEgY3Vyc29y' })).rejects.toThrow(BadQueryError);
  });
});

describe('lookup', () => {
  it('finds a run by id, by submit key, and by workflow:key', async () => {
    expect(await reader.lookup(diamondRun.toUpperCase())).toEqual([
      { kind: 'run', runId: diamondRun, workflow: 'uir_diamond' },
    ]);
    expect(await reader.lookup('order-42')).toEqual([
      { kind: 'submitKey', runId: diamondRun, workflow: 'uir_diamond' },
    ]);
    expect(await reader.lookup('uir_diamond:order-42')).toEqual([
      { kind: 'submitKey', runId: diamondRun, workflow: 'uir_diamond' },
    ]);
    expect(await reader.lookup(randomUUID())).toEqual([]);
    expect(await reader.lookup('no such key')).toEqual([]);
    expect(await reader.lookup('')).toEqual([]);
  });
});

describe('a run and its steps', () => {
  it('lists the steps with their upstream nodes, no bodies', async () => {
    const run = await reader.getRun(diamondRun);
    expect(run?.run).toMatchObject({
      runId: diamondRun,
      state: 'completed',
      stepsActive: 0,
      stepsTotal: 4,
    });
    expect(run?.truncated).toBe(false);
    expect(run?.steps.map((s) => [s.node, s.state, s.upstream.sort()])).toEqual([
      ['a', 'completed', []],
      ['b', 'completed', ['a']],
      ['c', 'completed', ['a']],
      ['d', 'completed', ['b', 'c']],
    ]);
    expect(run?.steps[0]?.outputBytes).toBeGreaterThan(0);
    expect(run?.steps[0]?.durationMs).toBeGreaterThanOrEqual(0);
    const cut = await reader.getRun(diamondRun, { maxSteps: 2 });
    expect(cut?.steps).toHaveLength(2);
    expect(cut?.truncated).toBe(true);
    // The whole run's count, not the steps this answer carries (the page's "steps left of").
    expect(cut?.run.stepsTotal).toBe(4);
    expect(await reader.getRun(randomUUID())).toBeNull();
    expect(await reader.getRun('not-a-uuid')).toBeNull();
  });

  it('shows a failed step with its errors, newest first', async () => {
    const run = await reader.getRun(brokenRun);
    expect(run?.steps[0]).toMatchObject({
      node: 'x',
      state: 'discarded',
      errorCount: 1,
      lastError: 'refused at attempt 1',
      lastErrorKind: 'non_retryable',
      outputBytes: null,
    });
    // Two more entries, as an operator retry's later attempts would add.
    await db.pool.query(
      `UPDATE cyclone.cyclone_steps SET errors = errors
         || '[{"attempt":2,"at":"2026-01-01T00:00:00Z","kind":"error","message":"second"},
              {"attempt":3,"at":"2026-01-01T00:01:00Z","kind":"timeout","message":"third","stack":"Error: third\\n    at x"}]'::jsonb
       WHERE run_id = $1`,
      [brokenRun],
    );
    const step = await reader.getStep(brokenRun, 'x', { maxErrors: 2 });
    expect(step?.errors).toEqual([
      {
        attempt: 3,
        at: '2026-01-01T00:01:00Z',
        kind: 'timeout',
        message: 'third',
        stack: 'Error: third\n    at x',
      },
      { attempt: 2, at: '2026-01-01T00:00:00Z', kind: 'error', message: 'second', stack: null },
    ]);
    expect(step?.errorCount).toBe(3);
    expect(step?.output).toBeNull();
    expect(await reader.stepOutput(brokenRun, 'x')).toEqual({ text: null });
    expect(await reader.getStep(brokenRun, 'nope')).toBeNull();
    expect(await reader.stepOutput(brokenRun, 'nope')).toBeNull();
  });

  it('returns outputs and inputs as JSON text: big numbers intact, previews cut', async () => {
    const big = '{"amount": 12345678901234567890, "note": "ünïcode"}';
    await db.pool.query(
      `UPDATE cyclone.cyclone_steps SET output = $2::jsonb WHERE run_id = $1 AND node = 'd'`,
      [diamondRun, big],
    );
    const step = await reader.getStep(diamondRun, 'd');
    expect(step?.upstream.sort()).toEqual(['b', 'c']);
    expect(step?.output?.text).toContain('12345678901234567890');
    expect(step?.output?.truncated).toBe(false);
    expect(step?.output?.bytes).toBe(Buffer.byteLength(step?.output?.text ?? '', 'utf8'));
    const cut = await reader.getStep(diamondRun, 'd', { previewChars: 10 });
    expect(cut?.output?.truncated).toBe(true);
    expect(cut?.output?.text).toHaveLength(10);
    expect(cut?.output?.bytes).toBe(step?.output?.bytes);
    const full = await reader.stepOutput(diamondRun, 'd');
    expect(full?.text).toContain('12345678901234567890');
    const input = await reader.runInput(paged[0] as string);
    expect(input).toMatchObject({ truncated: false });
    expect(JSON.parse(input?.text ?? '')).toHaveProperty('i');
    expect(await reader.runInput(randomUUID())).toBeNull();
  });
});

describe('overview, workflows and health', () => {
  it('counts runs and steps, capped', async () => {
    const o = await reader.overview();
    expect(o.runs.running).toEqual({ count: 12, capped: false });
    expect(o.runs.failed).toEqual({ count: 1, capped: false });
    expect(o.runs.failedLast24h).toEqual({ count: 1, capped: false });
    expect(o.steps.ready).toEqual({ count: 12, capped: false });
    expect(o.steps.queueLagMs).toBeGreaterThan(0);
    expect(o.recentFailed.map((r) => r.runId)).toEqual([brokenRun]);
    expect(o.workers.alive).toBe(0);
    const small = createUiReader({ client, max: 1, countCap: 5 });
    try {
      const c = await small.overview();
      expect(c.runs.running).toEqual({ count: 5, capped: true });
      expect(c.steps.ready).toEqual({ count: 5, capped: true });
    } finally {
      await small.close();
    }
  });

  it('lists workflows, lease owners and expired leases', async () => {
    const wf = await reader.listWorkflows();
    expect(wf.map((w) => [w.workflow, w.running.count, w.failed.count])).toEqual([
      ['uir_broken', 0, 1],
      ['uir_diamond', 0, 0],
      ['uir_idle', 12, 0],
    ]);
    // Two claims: one lease long, one already expired (as a dead worker's would be).
    await claimSteps(db.pool, client.db, {
      workflows: ['uir_idle'],
      limit: 2,
      workerId: 'w-live',
      leaseMs: 600_000,
      nodeKeys: ['uir_idle/only'],
    });
    await claimSteps(db.pool, client.db, {
      workflows: ['uir_idle'],
      limit: 1,
      workerId: 'w-dead',
      leaseMs: 1,
      nodeKeys: ['uir_idle/only'],
    });
    await db.pool.query('SELECT pg_sleep(0.05)');
    const h = await reader.health();
    expect(h.leaseOwners.map((o) => [o.owner, o.steps, o.expired])).toEqual([
      ['w-dead', 1, 1],
      ['w-live', 2, 0],
    ]);
    expect(h.expiredLeases).toEqual({ count: 1, capped: false });
    expect(h.oldestDueByAction).toEqual([
      expect.objectContaining({ workflow: 'uir_idle', action: 'uir_ok', due: 9 }),
    ]);
    const o = await reader.overview();
    expect(o.steps.running.count).toBe(3);
    expect(o.steps.expiredLeases.count).toBe(1);
  });
});

describe('every read is read-only and bounded', () => {
  it('refuses a write inside a read', async () => {
    await expect(
      reader.read((c) => c.query("DELETE FROM cyclone.cyclone_workers WHERE worker_id = 'x'")),
    ).rejects.toMatchObject({ code: '25006' });
  });

  it('cancels a read past the statement timeout', async () => {
    const quick = createUiReader({ connectionString: db.url, max: 1, statementTimeoutMs: 200 });
    try {
      const err = await quick.read((c) => c.query('SELECT pg_sleep(5)')).catch((e) => e);
      expect(err).toBeInstanceOf(QueryTimeoutError);
      expect(err).toMatchObject({ code: 'QUERY_TIMEOUT', timeoutMs: 200 });
      // The connection is usable again afterwards.
      expect((await quick.listWorkers()).length).toBe(0);
    } finally {
      await quick.close();
    }
  });
});
