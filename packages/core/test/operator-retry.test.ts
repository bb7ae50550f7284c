/**
 * Operator retry: `retry(runId, node)` and `retryAll(runId)` reopen discarded or cancelled nodes
 * in place — same run, same node, attempts keep counting — and the run proceeds; completed
 * nodes never run again; misuse is a typed error.
 */
import { randomUUID } from 'node:crypto';
import { deferred, waitFor } from '@cyclone/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  Client,
  InvalidStateError,
  NodeNotFoundError,
  NonRetryableError,
  newAction,
  newWorkflow,
  RunNotFoundError,
  Worker,
} from '../src/index.js';
import { createTestDb, type TestDb } from './support/db.js';

const calls = new Map<string, number>();
const called = (ctx: { runId: string; node: string }) => {
  const k = `${ctx.runId}:${ctx.node}`;
  calls.set(k, (calls.get(k) ?? 0) + 1);
};
const callsOf = (runId: string, node: string) => calls.get(`${runId}:${node}`) ?? 0;

/** Runs whose flaky/refusing nodes succeed; every other run's fail. */
const healed = new Set<string>();

const ok = newAction('ok', async (ctx) => {
  called(ctx);
  return { node: ctx.node, attempt: ctx.attempt };
});
const flaky = newAction(
  'flaky',
  async (ctx) => {
    called(ctx);
    if (!healed.has(ctx.runId)) throw new Error(`flaky failure at attempt ${ctx.attempt}`);
    return { node: ctx.node, attempt: ctx.attempt };
  },
  { maxAttempts: 2, backoff: () => 0 },
);
const refuses = newAction(
  'refuses',
  async (ctx) => {
    called(ctx);
    if (!healed.has(ctx.runId)) throw new NonRetryableError(`refused ${ctx.node}`);
    return { node: ctx.node };
  },
  { maxAttempts: 10 },
);
const Chain = newWorkflow('chain', {
  nodes: { a: { action: ok }, b: { action: flaky, after: ['a'] }, c: { action: ok, after: ['b'] } },
});
const Parallel = newWorkflow('parallel', {
  nodes: { x: { action: refuses }, y: { action: refuses }, z: { action: ok, after: ['x', 'y'] } },
});

// A root that blocks its first attempt until released, writing on its completionTx.
const gate = deferred();
const firstReturned = deferred();
const blocking = newAction(
  'blocking',
  async (ctx) => {
    called(ctx);
    const tx = await ctx.completionTx();
    await tx.query('INSERT INTO effects (run_id, node, attempt) VALUES ($1, $2, $3)', [
      ctx.runId,
      ctx.node,
      ctx.attempt,
    ]);
    if (ctx.attempt === 1) {
      await gate.promise;
      firstReturned.resolve();
    }
    return { attempt: ctx.attempt };
  },
  { backoff: () => 0 },
);
const Blocking = newWorkflow('blocking', {
  nodes: { slow: { action: blocking }, next: { action: ok, after: ['slow'] } },
});

// Claimed only by a worker started late in its test.
const Later = newWorkflow('later', {
  nodes: { p: { action: ok }, q: { action: ok, after: ['p'] } },
});

describe('operator retry', () => {
  let db: TestDb;
  let client: Client;
  const workers: Worker[] = [];

  beforeAll(async () => {
    db = await createTestDb();
    await db.pool.query(
      'CREATE TABLE effects (run_id uuid NOT NULL, node text NOT NULL, attempt int NOT NULL)',
    );
    client = new Client({ connectionString: db.url, poolSize: 4 });
    const worker = new Worker({
      client,
      workflows: [Chain, Parallel, Blocking],
      concurrency: 4,
      poolSize: 8,
      pollIntervalMs: 50,
      heartbeatIntervalMs: 100,
    });
    workers.push(worker);
    await worker.start();
  });

  afterAll(async () => {
    gate.resolve();
    await Promise.all(workers.map((w) => w.stop({ graceMs: 1_000 })));
    await client?.close();
    await db?.drop();
  });

  async function countRows() {
    const { rows } = await db.pool.query<{ runs: number; steps: number }>(
      `SELECT (SELECT count(*)::int FROM cyclone.cyclone_runs) AS runs,
              (SELECT count(*)::int FROM cyclone.cyclone_steps) AS steps`,
    );
    return rows[0];
  }

  it('retry reopens an exhausted node in place, attempts keep counting, and the run completes', async () => {
    const { runId } = await client.submit(Chain, {});
    const failed = await client.waitForRun(runId, { timeoutMs: 20_000 });
    expect(failed.state).toBe('failed');
    const b0 = failed.steps.find((s) => s.node === 'b');
    expect(b0).toMatchObject({ state: 'discarded', attempt: 2, maxAttempts: 2 });
    expect(failed.steps.find((s) => s.node === 'c')?.state).toBe('pending');

    const before = await countRows();
    healed.add(runId);
    expect(await client.retry(runId, 'b')).toEqual(['b']);
    const reopened = await client.getRun(runId);
    expect(['running', 'completed']).toContain(reopened.state);
    if (reopened.state === 'running') expect(reopened.completedAt).toBeNull();
    const b1 = reopened.steps.find((s) => s.node === 'b');
    // Exhausted attempts: max_attempts is raised so the reopened node can run.
    expect(b1?.maxAttempts).toBeGreaterThan(2);

    const run = await client.waitForRun(runId, { timeoutMs: 20_000 });
    expect(run.state).toBe('completed');
    expect(run.runId).toBe(runId);
    const b = run.steps.find((s) => s.node === 'b');
    expect(b).toMatchObject({
      node: 'b',
      state: 'completed',
      attempt: 3,
      output: { node: 'b', attempt: 3 },
    });
    expect(b?.maxAttempts).toBeGreaterThanOrEqual(3);
    expect(b?.errors.map((e) => e.attempt)).toEqual([1, 2]);
    // Nothing cloned: same rows, same ids.
    expect(await countRows()).toEqual(before);
    expect(run.steps.map((s) => s.node).sort()).toEqual(['a', 'b', 'c']);
    // Completed nodes never ran again.
    expect(callsOf(runId, 'a')).toBe(1);
    expect(callsOf(runId, 'b')).toBe(3);
    expect(callsOf(runId, 'c')).toBe(1);
    expect(run.steps.find((s) => s.node === 'a')?.attempt).toBe(1);

    // Retrying a node of the completed run is an InvalidStateError.
    const err = await client.retry(runId, 'a').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InvalidStateError);
    expect(err).toMatchObject({ code: 'INVALID_STATE', runId, node: 'a', state: 'completed' });
    // retryAll of a completed run reopens nothing.
    expect(await client.retryAll(runId)).toEqual([]);
    expect((await client.getRun(runId)).state).toBe('completed');
    expect(callsOf(runId, 'a')).toBe(1);
  });

  it('retryAll reopens every discarded node of the run; the join then runs once', async () => {
    const { runId } = await client.submit(Parallel, {});
    const failed = await client.waitForRun(runId, { timeoutMs: 20_000 });
    const discarded = failed.steps.filter((s) => s.state === 'discarded').map((s) => s.node);
    expect(failed.state).toBe('failed');
    expect(discarded.sort()).toEqual(['x', 'y']);

    healed.add(runId);
    expect((await client.retryAll(runId)).sort()).toEqual(discarded.sort());
    const run = await client.waitForRun(runId, { timeoutMs: 20_000 });
    expect(run.state).toBe('completed');
    for (const n of discarded) {
      const s = run.steps.find((x) => x.node === n);
      // Discarded by NonRetryableError at attempt 1 of 10: reopened without raising the budget.
      expect(s).toMatchObject({ state: 'completed', attempt: 2, maxAttempts: 10 });
      expect(s?.errors.map((e) => e.kind)).toEqual(['non_retryable']);
      expect(callsOf(runId, n)).toBe(2);
    }
    expect(callsOf(runId, 'z')).toBe(1);
  });

  it('retry of a node that is not discarded or cancelled is an InvalidStateError', async () => {
    const { runId } = await client.submit(Chain, {});
    const failed = await client.waitForRun(runId, { timeoutMs: 20_000 });
    expect(failed.state).toBe('failed');
    for (const [node, state] of [
      ['a', 'completed'],
      ['c', 'pending'],
    ] as const) {
      const err = await client.retry(runId, node).catch((e: unknown) => e);
      expect(err, node).toBeInstanceOf(InvalidStateError);
      expect(err).toMatchObject({ runId, node, state });
    }
    // Nothing changed.
    const after = await client.getRun(runId);
    expect(after.state).toBe('failed');
    expect(after.steps.map((s) => [s.node, s.state])).toEqual(
      failed.steps.map((s) => [s.node, s.state]),
    );
    healed.add(runId);
  });

  it('unknown node → NodeNotFoundError; unknown run → RunNotFoundError', async () => {
    const { runId } = await client.submit(Chain, {});
    const e1 = await client.retry(runId, 'nope').catch((e: unknown) => e);
    expect(e1).toBeInstanceOf(NodeNotFoundError);
    expect(e1).toMatchObject({ code: 'NODE_NOT_FOUND', runId, node: 'nope' });
    const missing = randomUUID();
    for (const call of [() => client.retry(missing, 'a'), () => client.retryAll(missing)]) {
      const e = await call().catch((x: unknown) => x);
      expect(e).toBeInstanceOf(RunNotFoundError);
      expect(e).toMatchObject({ code: 'RUN_NOT_FOUND', runId: missing });
    }
    await client.waitForRun(runId, { timeoutMs: 20_000 });
  });

  it('cancel before anything ran, then retryAll: the run resumes and completes', async () => {
    const { runId } = await client.submit(Later, {});
    await client.cancel(runId);
    const cancelled = await client.getRun(runId);
    expect(cancelled.state).toBe('cancelled');
    expect(cancelled.completedAt).toBeInstanceOf(Date);
    expect(cancelled.steps.map((s) => s.state)).toEqual(['cancelled', 'cancelled']);
    await client.cancel(runId); // cancelling a cancelled run does nothing

    expect((await client.retryAll(runId)).sort()).toEqual(['p', 'q']);
    const resumed = await client.getRun(runId);
    expect(resumed.state).toBe('running');
    expect(resumed.completedAt).toBeNull();
    expect(Object.fromEntries(resumed.steps.map((s) => [s.node, s.state]))).toEqual({
      p: 'available',
      q: 'pending',
    });

    const late = new Worker({ client, workflows: [Later], concurrency: 2, pollIntervalMs: 50 });
    workers.push(late);
    await late.start();
    const run = await client.waitForRun(runId, { timeoutMs: 20_000 });
    expect(run.state).toBe('completed');
    expect(callsOf(runId, 'p')).toBe(1);
    expect(callsOf(runId, 'q')).toBe(1);

    // A completed run cannot be cancelled.
    await expect(client.cancel(runId)).rejects.toBeInstanceOf(InvalidStateError);
  });

  it('cancel while a handler runs, then retryAll: the stale attempt is fenced out, the run completes', async () => {
    const { runId } = await client.submit(Blocking, {});
    await waitFor('slow to be running', async () => {
      const r = await client.getRun(runId);
      return r.steps.find((s) => s.node === 'slow')?.state === 'running';
    });
    await waitFor('attempt 1 to have written', async () => callsOf(runId, 'slow') === 1);
    await client.cancel(runId);
    const cancelled = await client.getRun(runId);
    expect(cancelled.state).toBe('cancelled');
    expect(cancelled.steps.map((s) => s.state)).toEqual(['cancelled', 'cancelled']);

    gate.resolve();
    await firstReturned.promise;
    // Attempt 1 returned after the cancel: it must not have completed anything.
    await waitFor('the run to stay cancelled with slow cancelled', async () => {
      const r = await client.getRun(runId);
      return r.state === 'cancelled' && r.steps.every((s) => s.state === 'cancelled');
    });

    expect((await client.retryAll(runId)).sort()).toEqual(['next', 'slow']);
    const run = await client.waitForRun(runId, { timeoutMs: 20_000 });
    expect(run.state).toBe('completed');
    expect(run.steps.find((s) => s.node === 'slow')).toMatchObject({
      state: 'completed',
      attempt: 2,
      output: { attempt: 2 },
    });
    const { rows } = await db.pool.query<{ attempt: number }>(
      'SELECT attempt FROM effects WHERE run_id = $1',
      [runId],
    );
    expect(rows).toEqual([{ attempt: 2 }]);
    expect(callsOf(runId, 'next')).toBe(1);
  });
});
