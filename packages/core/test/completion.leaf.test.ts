/**
 * The leaf completion (sql/complete.ts, `completeLeafFrom`): a step whose node has no downstream
 * node completes without the downstream CTEs. Every claim says which steps are leaves, from the
 * step row; a batch of leaves alone takes the leaf form, a mixed one the full form; the fence,
 * the run's counters and its transitions are the full form's.
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CompletionBatcher } from '../src/completion-batcher.js';
import { Client, newAction, newWorkflow, Worker } from '../src/index.js';
import {
  claimStepsSharedSql,
  claimStepsSharedWithoutUpstreamSql,
  claimStepsSql,
  claimStepsWithoutUpstreamSql,
} from '../src/sql/claim.js';
import {
  completeStep,
  completeStepOnTx,
  completeSteps,
  isFencedOut,
  skipStep,
} from '../src/sql/complete.js';
import { claimLimited } from '../src/sql/flow.js';
import type { SqlScope } from '../src/sql/statement.js';
import { createTestDb, type TestDb } from './support/db.js';

const Q = '"cyclone"';
const CHANNEL = 'cyclone_cyclone';
const noop = newAction('leaf_noop', async () => null);
const limited = newAction('leaf_limited', async () => null, { concurrency: { limit: 50 } });
/** One node: a leaf. */
const Single = newWorkflow('leaf_single', { nodes: { only: { action: noop } } });
/** Two independent roots, both leaves. */
const Pair = newWorkflow('leaf_pair', { nodes: { p: { action: noop }, q: { action: noop } } });
/** a → b: a is not a leaf, b is. */
const Chain = newWorkflow('leaf_chain', {
  nodes: { a: { action: noop }, b: { action: noop, after: ['a'] } },
});
/** A limited action's chain (the limited claim). */
const Limited = newWorkflow('leaf_limited', {
  nodes: { a: { action: limited }, b: { action: limited, after: ['a'] } },
});

const NODE_KEYS = [
  'leaf_single/only',
  'leaf_pair/p',
  'leaf_pair/q',
  'leaf_chain/a',
  'leaf_chain/b',
  'leaf_limited/a',
  'leaf_limited/b',
];
const WORKFLOWS = ['leaf_single', 'leaf_pair', 'leaf_chain', 'leaf_limited'];

interface Claimed {
  run_id: string;
  node: string;
  attempt: number;
  leaf: boolean;
}

let db: TestDb;
let client: Client;
const scope: SqlScope = { q: Q, channel: CHANNEL, prepare: true };

beforeAll(async () => {
  db = await createTestDb();
  client = new Client({ connectionString: db.url });
});
afterAll(async () => {
  await client?.close();
  await db?.drop();
});

/** Claims every claimable step (plain claim) as worker `w`; those of `runIds`, in their order. */
async function claimRuns(...runIds: string[]): Promise<Claimed[]> {
  const { rows } = await db.pool.query<Claimed>(claimStepsSql(Q), [
    WORKFLOWS,
    1000,
    'w',
    60_000,
    NODE_KEYS,
  ]);
  return runIds.flatMap((id) =>
    rows.filter((r) => r.run_id === id).sort((x, y) => x.node.localeCompare(y.node)),
  );
}
const claimRun = (runId: string) => claimRuns(runId);

/** Claims the step `node` of `runId`, which must be claimable. */
async function claimOne(runId: string, node: string): Promise<Claimed> {
  const step = (await claimRun(runId)).find((r) => r.node === node);
  if (!step) throw new Error(`${node} of ${runId} not claimed`);
  return step;
}

async function runRow(runId: string) {
  const { rows } = await db.pool.query(
    `SELECT state, steps_remaining, steps_active, completed_at IS NOT NULL AS ended
     FROM cyclone.cyclone_runs WHERE id = $1`,
    [runId],
  );
  return rows[0];
}

async function stepRow(runId: string, node: string) {
  const { rows } = await db.pool.query(
    'SELECT state, attempt, output FROM cyclone.cyclone_steps WHERE run_id = $1 AND node = $2',
    [runId, node],
  );
  return rows[0];
}

const completion = (s: Claimed, leaf = s.leaf) => ({
  runId: s.run_id,
  node: s.node,
  attempt: s.attempt,
  output: JSON.stringify({ node: s.node }),
  leaf,
});

describe('the claims say which steps are leaves', () => {
  it('the plain, without-upstream and shared claims, from the step row', async () => {
    const variants: [string, string, unknown[]][] = [
      ['plain', claimStepsSql(Q), [WORKFLOWS, 1000, 'w', 60_000, NODE_KEYS]],
      [
        'without upstream',
        claimStepsWithoutUpstreamSql(Q),
        [WORKFLOWS, 1000, 'w', 60_000, NODE_KEYS],
      ],
      [
        'shared',
        claimStepsSharedSql(Q),
        [WORKFLOWS, 1000, ['w1', 'w2'], 60_000, NODE_KEYS, [500, 500]],
      ],
      [
        'shared without upstream',
        claimStepsSharedWithoutUpstreamSql(Q),
        [WORKFLOWS, 1000, ['w1', 'w2'], 60_000, NODE_KEYS, [500, 500]],
      ],
    ];
    for (const [name, text, values] of variants) {
      const single = (await client.submit(Single, {})).runId;
      const chain = (await client.submit(Chain, {})).runId;
      const { rows } = await db.pool.query<Claimed>(text, values);
      const of = (runId: string, node: string) =>
        rows.find((r) => r.run_id === runId && r.node === node)?.leaf;
      expect(of(single, 'only'), name).toBe(true);
      expect(of(chain, 'a'), name).toBe(false);
      // The chain's leaf, once its upstream completed.
      const a = rows.find((r) => r.run_id === chain && r.node === 'a') as Claimed;
      expect(await completeStep(db.pool, scope, completion(a))).toHaveLength(1);
      const again = await db.pool.query<Claimed>(text, values);
      expect(again.rows.find((r) => r.run_id === chain && r.node === 'b')?.leaf, name).toBe(true);
    }
  });

  it('the limited claim (with and without the upstream outputs)', async () => {
    const conn = await db.pool.connect();
    try {
      for (const withoutUpstream of [false, true]) {
        const { runId } = await client.submit(Limited, {});
        const claim = () =>
          claimLimited(conn, scope, `test:${Q}:leaf_limited`, {
            action: 'leaf_limited',
            workflows: WORKFLOWS,
            nodeKeys: NODE_KEYS,
            want: 10,
            workerId: 'w',
            leaseMs: 60_000,
            limits: { concurrency: 50, keyedConcurrency: null, rate: null, keyedRate: null },
            cursor: '',
            maxKeys: 16,
            perKey: 10,
            withoutUpstream,
          });
        const first = (await claim()).steps.filter((s) => s.run_id === runId);
        expect(first.map((s) => [s.node, s.leaf])).toEqual([['a', false]]);
        const a = first[0] as Claimed;
        expect(await completeStep(db.pool, scope, completion(a))).toHaveLength(1);
        const second = (await claim()).steps.filter((s) => s.run_id === runId);
        expect(second.map((s) => [s.node, s.leaf])).toEqual([['b', true]]);
      }
    } finally {
      conn.release();
    }
  });
});

describe('run state and counters after a leaf completes', () => {
  it('a one-node run completes', async () => {
    const { runId } = await client.submit(Single, {});
    const only = await claimOne(runId, 'only');
    expect(only.leaf).toBe(true);
    const rows = await completeStep(db.pool, scope, completion(only));
    expect(rows).toEqual([{ run_id: runId, node: 'only', attempt: only.attempt, notified: 0 }]);
    expect(await stepRow(runId, 'only')).toMatchObject({
      state: 'completed',
      output: { node: 'only' },
    });
    expect(await runRow(runId)).toEqual({
      state: 'completed',
      steps_remaining: 0,
      steps_active: 0,
      ended: true,
    });
    // Again: fenced out, nothing moves twice.
    expect(await completeStep(db.pool, scope, completion(only))).toEqual([]);
    expect(await runRow(runId)).toMatchObject({ steps_remaining: 0, steps_active: 0 });
  });

  it('a run whose leaf completes first stays running; its last leaf completes it', async () => {
    const { runId } = await client.submit(Pair, {});
    const steps = await claimRun(runId);
    const p = steps.find((s) => s.node === 'p') as Claimed;
    const q = steps.find((s) => s.node === 'q') as Claimed;
    expect([p.leaf, q.leaf]).toEqual([true, true]);
    expect(await completeStep(db.pool, scope, completion(p))).toHaveLength(1);
    expect(await runRow(runId)).toEqual({
      state: 'running',
      steps_remaining: 1,
      steps_active: 1,
      ended: false,
    });
    expect(await completeStep(db.pool, scope, completion(q))).toHaveLength(1);
    expect(await runRow(runId)).toEqual({
      state: 'completed',
      steps_remaining: 0,
      steps_active: 0,
      ended: true,
    });
  });

  it('a multi-node run whose leaf completes last completes', async () => {
    const { runId } = await client.submit(Chain, {});
    const a = await claimOne(runId, 'a');
    expect(await completeStep(db.pool, scope, completion(a))).toHaveLength(1);
    expect(await runRow(runId)).toMatchObject({ state: 'running', steps_remaining: 1 });
    const b = await claimOne(runId, 'b');
    expect(b.leaf).toBe(true);
    expect(await completeStep(db.pool, scope, completion(b))).toHaveLength(1);
    expect(await runRow(runId)).toEqual({
      state: 'completed',
      steps_remaining: 0,
      steps_active: 0,
      ended: true,
    });
  });

  it('a leaf skipped completes its run too', async () => {
    const { runId } = await client.submit(Single, {});
    const only = await claimOne(runId, 'only');
    const rows = await skipStep(db.pool, scope, { ...completion(only) });
    expect(rows).toHaveLength(1);
    expect(await stepRow(runId, 'only')).toMatchObject({ state: 'skipped' });
    expect(await runRow(runId)).toMatchObject({ state: 'completed', steps_remaining: 0 });
  });

  it('a non-leaf passed as a leaf fails the statement (not a fence-out) and changes nothing', async () => {
    const { runId } = await client.submit(Chain, {});
    const a = await claimOne(runId, 'a');
    expect(a.leaf).toBe(false);
    const err = await completeStep(db.pool, scope, completion(a, true)).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeDefined();
    expect(isFencedOut(err)).toBe(false);
    expect(String(err)).toContain('which has downstream nodes');
    expect(await stepRow(runId, 'a')).toMatchObject({ state: 'running', attempt: a.attempt });
    expect(await runRow(runId)).toMatchObject({ steps_remaining: 2, steps_active: 1 });
  });
});

describe('batches', () => {
  /** A pool of one connection, so that its prepared statements say which forms were sent. */
  async function withBatcher<T>(
    body: (b: CompletionBatcher, names: () => Promise<string[]>) => Promise<T>,
  ): Promise<T> {
    const pool = new pg.Pool({ connectionString: db.url, max: 1 });
    try {
      const names = async () =>
        (await pool.query<{ name: string }>('SELECT name FROM pg_prepared_statements')).rows.map(
          (r) => r.name.replace(/_[0-9a-f]{8}$/, ''),
        );
      return await body(new CompletionBatcher(pool, scope), names);
    } finally {
      await pool.end();
    }
  }

  it('a batch of leaves alone: the leaf form, fenced per step, two leaves of one run counted once each', async () => {
    const pair = (await client.submit(Pair, {})).runId;
    const single = (await client.submit(Single, {})).runId;
    const steps = await claimRuns(pair, single);
    expect(steps.map((s) => s.leaf)).toEqual([true, true, true]);
    const stale = { ...(steps[2] as Claimed), attempt: 99 };
    const done = await completeSteps(
      db.pool,
      scope,
      [...steps, stale].map((s) => completion(s)),
    );
    expect(done).toHaveLength(3);
    expect(await runRow(pair)).toEqual({
      state: 'completed',
      steps_remaining: 0,
      steps_active: 0,
      ended: true,
    });
    expect(await runRow(single)).toMatchObject({ state: 'completed', steps_remaining: 0 });
    await withBatcher(async (batcher, names) => {
      const run = (await client.submit(Pair, {})).runId;
      const [p, q] = await claimRun(run);
      if (!p || !q) throw new Error('not claimed');
      // Added in one turn of the event loop: the three go out in one batch.
      const r = await Promise.all([
        batcher.complete(p.run_id, p.node, p.attempt, 'null', true),
        batcher.complete(q.run_id, q.node, q.attempt - 1, 'null', true),
        batcher.complete(q.run_id, q.node, q.attempt, 'null', true),
      ]);
      expect(r).toEqual([1, 0, 1]);
      expect(await names()).toEqual(['cyclone_complete_steps_leaf']);
      expect(await runRow(run)).toMatchObject({ state: 'completed', steps_remaining: 0 });
    });
  });

  it('a leaf and a non-leaf completion in one batch: the full form, the join released', async () => {
    await withBatcher(async (batcher, names) => {
      const chain = (await client.submit(Chain, {})).runId;
      const single = (await client.submit(Single, {})).runId;
      const pair = (await client.submit(Pair, {})).runId;
      const [a, only, p, q] = await claimRuns(chain, single, pair);
      if (!a || !only || !p || !q) throw new Error('not claimed');
      expect([a.node, only.node, p.node, q.node]).toEqual(['a', 'only', 'p', 'q']);
      // Added in one turn of the event loop: one mixed batch.
      const r = await Promise.all([
        batcher.complete(p.run_id, p.node, p.attempt, 'null', true),
        batcher.complete(a.run_id, a.node, a.attempt, '{"a":1}', false),
        batcher.complete(only.run_id, only.node, only.attempt, 'null', true),
        batcher.complete(q.run_id, q.node, q.attempt - 1, 'null', true),
      ]);
      expect(r).toEqual([1, 1, 1, 0]);
      expect(await names()).toEqual(['cyclone_complete_steps']);
      const { rows } = await db.pool.query(
        `SELECT state, deps_remaining FROM cyclone.cyclone_steps WHERE run_id = $1 AND node = 'b'`,
        [chain],
      );
      expect(rows[0]).toEqual({ state: 'available', deps_remaining: 0 });
      expect(await runRow(chain)).toEqual({
        state: 'running',
        steps_remaining: 1,
        steps_active: 1,
        ended: false,
      });
      expect(await runRow(single)).toMatchObject({ state: 'completed', steps_remaining: 0 });
      // p completed, q fenced out (its stale attempt): the pair's run still waits for q.
      expect(await runRow(pair)).toEqual({
        state: 'running',
        steps_remaining: 1,
        steps_active: 1,
        ended: false,
      });
    });
  });
});

describe('the leaf completion on a completionTx', () => {
  it('completes with the transaction, and raises FENCED_OUT when fenced out', async () => {
    const c = await db.pool.connect();
    let failed: unknown;
    try {
      const { runId } = await client.submit(Single, {});
      const only = await claimOne(runId, 'only');
      await c.query('BEGIN');
      const err = await completeStepOnTx(c, scope, {
        ...completion(only),
        attempt: only.attempt - 1,
        idleLimitMs: 10_000,
      }).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(isFencedOut(err)).toBe(true);
      await c.query('ROLLBACK');
      expect(await runRow(runId)).toMatchObject({ state: 'running', steps_remaining: 1 });

      await c.query('BEGIN');
      const rows = await completeStepOnTx(c, scope, { ...completion(only), idleLimitMs: 10_000 });
      expect(rows).toEqual([
        { run_id: runId, node: 'only', attempt: only.attempt, notified: 0, idle_limit: '10s' },
      ]);
      await c.query('COMMIT');
      expect(await runRow(runId)).toEqual({
        state: 'completed',
        steps_remaining: 0,
        steps_active: 0,
        ended: true,
      });
    } catch (err) {
      failed = err;
      throw err;
    } finally {
      c.release(failed as Error | undefined);
    }
  });

  it('a worker completes leaf and non-leaf steps on completionTx and in batches', async () => {
    await db.pool.query('CREATE TABLE IF NOT EXISTS public.leaf_rows (run_id uuid, node text)');
    const seen = new Set<string>();
    const tx = newAction('leaf_tx', async (ctx) => {
      const t = await ctx.completionTx();
      await t.query('INSERT INTO public.leaf_rows (run_id, node) VALUES ($1, $2)', [
        ctx.runId,
        ctx.node,
      ]);
      // The step pool's completions so far, prepared on this connection: which forms were sent.
      const { rows } = await t.query('SELECT name FROM pg_prepared_statements');
      for (const r of rows as { name: string }[]) seen.add(r.name.replace(/_[0-9a-f]{8}$/, ''));
      return null;
    });
    const TxChain = newWorkflow('leaf_tx_chain', {
      nodes: {
        a: { action: tx },
        b: { action: noop, after: ['a'] },
        c: { action: tx, after: ['a'] },
      },
    });
    const worker = new Worker({
      client,
      workflows: [Single, Pair, Chain, TxChain],
      concurrency: 8,
      pollIntervalMs: 20,
    });
    await worker.start();
    try {
      const ids: string[] = [];
      for (let i = 0; i < 10; i++) {
        for (const w of [Single, Pair, Chain, TxChain])
          ids.push((await client.submit(w, {})).runId);
      }
      for (const id of ids) {
        expect((await client.waitForRun(id, { timeoutMs: 20_000 })).state).toBe('completed');
      }
    } finally {
      await worker.stop({ graceMs: 2_000 });
    }
    const { rows } = await db.pool.query('SELECT count(*)::int AS n FROM public.leaf_rows');
    expect(rows[0].n).toBe(20);
    expect(seen).toContain('cyclone_complete_step_on_tx_leaf');
    expect(seen).toContain('cyclone_complete_step_on_tx');
  });
});
