/**
 * Batched completion (sql/complete.ts, completeSteps): several steps, of one run or of several, completed in
 * one statement. Each step stays fenced on its attempt; a join whose upstreams complete in the
 * same batch is released once; run counters move by the batch's sums.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CompletionBatcher } from '../src/completion-batcher.js';
import { Client, newAction, newWorkflow } from '../src/index.js';
import { claimStepsSql } from '../src/sql/claim.js';
import { completeStepsSql } from '../src/sql/complete.js';
import { createTestDb, type TestDb } from './support/db.js';

const Q = '"cyclone"';
const noop = newAction('noop', async () => null);
const Diamond = newWorkflow('batch_diamond', {
  nodes: {
    a: { action: noop },
    b: { action: noop, after: ['a'] },
    c: { action: noop, after: ['a'] },
    d: { action: noop, after: ['b', 'c'] },
  },
});

describe('completeBatch', () => {
  let db: TestDb;
  let client: Client;

  beforeAll(async () => {
    db = await createTestDb();
    client = new Client({ connectionString: db.url });
  });
  afterAll(async () => {
    await client.close();
    await db.drop();
  });

  /** Claims every claimable step of the workflow (attempt + 1) as worker `w`. */
  async function claimAll(): Promise<{ run_id: string; node: string; attempt: number }[]> {
    const { rows } = await db.pool.query(claimStepsSql(Q), [
      ['batch_diamond'],
      1000,
      'w',
      60_000,
      ['batch_diamond/a', 'batch_diamond/b', 'batch_diamond/c', 'batch_diamond/d'],
    ]);
    return rows;
  }

  async function batch(steps: { run_id: string; node: string; attempt: number }[]) {
    const { rows } = await db.pool.query(completeStepsSql(Q), [
      steps.map((s) => s.run_id),
      steps.map((s) => s.node),
      steps.map((s) => s.attempt),
      steps.map((s) => JSON.stringify({ node: s.node })),
      'cyclone_cyclone',
    ]);
    return rows as { run_id: string; node: string }[];
  }

  it('releases a join once when both upstreams complete in one batch, across several runs', async () => {
    const runs = await Promise.all([1, 2, 3].map(() => client.submit(Diamond, {})));
    const ids = new Set(runs.map((r) => r.runId));
    const mine = async () => (await claimAll()).filter((s) => ids.has(s.run_id));

    const roots = await mine();
    expect(roots.map((s) => s.node).sort()).toEqual(['a', 'a', 'a']);
    expect(await batch(roots)).toHaveLength(3);

    const middles = await mine();
    expect(middles).toHaveLength(6);
    // A stale attempt in the same batch is fenced out and changes nothing.
    const stale = { ...middles[0], attempt: 99 } as (typeof middles)[number];
    const done = await batch([...middles, stale]);
    expect(done).toHaveLength(6);

    const { rows: joins } = await db.pool.query(
      `SELECT run_id, state, deps_remaining FROM cyclone.cyclone_steps
       WHERE node = 'd' AND run_id = ANY($1)`,
      [[...ids]],
    );
    expect(joins).toHaveLength(3);
    for (const j of joins) expect(j).toMatchObject({ state: 'available', deps_remaining: 0 });
    const { rows: before } = await db.pool.query(
      'SELECT state, steps_remaining, steps_active FROM cyclone.cyclone_runs WHERE id = ANY($1)',
      [[...ids]],
    );
    for (const r of before)
      expect(r).toEqual({ state: 'running', steps_remaining: 1, steps_active: 1 });

    const last = await mine();
    expect(last.map((s) => s.node)).toEqual(['d', 'd', 'd']);
    expect(await batch(last)).toHaveLength(3);
    // Completing the same claims again is fenced out: nothing moves twice.
    expect(await batch(last)).toHaveLength(0);
    const { rows: after } = await db.pool.query(
      `SELECT state, steps_remaining, steps_active, completed_at IS NOT NULL AS done
       FROM cyclone.cyclone_runs WHERE id = ANY($1)`,
      [[...ids]],
    );
    for (const r of after) {
      expect(r).toEqual({ state: 'completed', steps_remaining: 0, steps_active: 0, done: true });
    }
  });

  it('the batcher reports a node that is in one batch at two attempts by attempt', async () => {
    const { runId } = await client.submit(Diamond, {});
    const [root] = (await claimAll()).filter((s) => s.run_id === runId);
    if (!root) throw new Error('no root claimed');
    // Another batch in flight first, so the two calls below queue into the same next batch.
    const other = await client.submit(Diamond, {});
    const [otherRoot] = (await claimAll()).filter((s) => s.run_id === other.runId);
    if (!otherRoot) throw new Error('no root claimed');
    const batcher = new CompletionBatcher(db.pool, {
      q: Q,
      channel: 'cyclone_cyclone',
      prepare: true,
    });
    const first = batcher.complete(otherRoot.run_id, otherRoot.node, otherRoot.attempt, 'null');
    const stale = batcher.complete(root.run_id, root.node, root.attempt - 1, 'null');
    const current = batcher.complete(root.run_id, root.node, root.attempt, 'null');
    expect(await first).toBe(1);
    expect(await stale).toBe(0);
    expect(await current).toBe(1);
  });
});
