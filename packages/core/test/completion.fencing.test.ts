/**
 * Fenced completion: a worker whose lease expired (no heartbeats) and whose step was reclaimed
 * by another worker cannot complete it; its completionTx writes roll back, so the business
 * table (deliberately WITHOUT a unique constraint) holds exactly one row per (run, node).
 */
import {
  type Deferred,
  deferred,
  engineClientOptions,
  engineUrl,
  engineWorkerOptions,
  waitFor,
} from '@cyclone/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, newAction, newWorkflow, Worker } from '../src/index.js';
import { NO_HEARTBEAT } from '../src/internal.js';
import { createTestDb, type TestDb } from './support/db.js';
import { captureLogger } from './support/logger.js';

describe('completion fencing', () => {
  let db: TestDb;
  let client: Client;
  const workers: Worker[] = [];

  beforeAll(async () => {
    db = await createTestDb();
    client = new Client({
      connectionString: engineUrl(db.url),
      poolSize: 4,
      ...engineClientOptions,
    });
    // No unique constraint: a second committed write would show as a second row.
    await db.pool.query(
      'CREATE TABLE effects (run_id uuid NOT NULL, node text NOT NULL, attempt int NOT NULL, phase text NOT NULL)',
    );
  });

  afterAll(async () => {
    await Promise.all(workers.map((w) => w.stop({ graceMs: 1_000 }).catch(() => {})));
    await client?.close();
    await db?.drop();
  });

  /**
   * A workflow of one node whose attempts are controlled by the test: attempt n signals
   * `started[n]`, writes a row on its completionTx, waits for `release[n]`, writes another row,
   * and returns `{ by: n }`.
   */
  function controlled(name: string) {
    const started = new Map<number, Deferred>();
    const release = new Map<number, Deferred>();
    const lateWrite = new Map<number, 'ok' | string>();
    const returned = new Map<number, Deferred>();
    const gate = <T>(m: Map<number, Deferred<T>>, n: number) => {
      let d = m.get(n);
      if (!d) {
        d = deferred<T>();
        m.set(n, d);
      }
      return d;
    };
    const action = newAction(
      `${name}_action`,
      async (ctx) => {
        const tx = await ctx.completionTx();
        await tx.query('INSERT INTO effects VALUES ($1, $2, $3, $4)', [
          ctx.runId,
          ctx.node,
          ctx.attempt,
          'early',
        ]);
        gate(started, ctx.attempt).resolve();
        await gate(release, ctx.attempt).promise;
        try {
          await tx.query('INSERT INTO effects VALUES ($1, $2, $3, $4)', [
            ctx.runId,
            ctx.node,
            ctx.attempt,
            'late',
          ]);
          lateWrite.set(ctx.attempt, 'ok');
        } catch (err) {
          lateWrite.set(ctx.attempt, (err as Error).name);
        }
        gate(returned, ctx.attempt).resolve();
        return { by: ctx.attempt };
      },
      { maxAttempts: 5, backoff: () => 0 },
    );
    const wf = newWorkflow(name, { nodes: { only: { action } } });
    return {
      wf,
      started: (n: number) => gate(started, n).promise,
      release: (n: number) => gate(release, n).resolve(),
      returned: (n: number) => gate(returned, n).promise,
      lateWrite,
    };
  }

  /** The slow worker: a 300 ms lease that nothing extends. */
  function slowWorker(
    wf: ReturnType<typeof controlled>['wf'],
    logger: ReturnType<typeof captureLogger>['logger'],
  ) {
    const w = new Worker({
      client,
      workflows: [wf],
      concurrency: 1,
      leaseMs: 300,
      [NO_HEARTBEAT]: true,
      sweepIntervalMs: 1_000_000_000,
      pollIntervalMs: 50,
      logger,
      workerId: `slow-${wf.name}`,
      ...engineWorkerOptions,
    });
    workers.push(w);
    return w;
  }

  /** The rescuer: a normal lease, a fast sweep. */
  function rescuer(wf: ReturnType<typeof controlled>['wf']) {
    const w = new Worker({
      client,
      workflows: [wf],
      concurrency: 2,
      sweepIntervalMs: 50,
      pollIntervalMs: 50,
      workerId: `rescuer-${wf.name}`,
      ...engineWorkerOptions,
    });
    workers.push(w);
    return w;
  }

  async function effects(runId: string) {
    const { rows } = await db.pool.query<{ attempt: number; phase: string }>(
      'SELECT attempt, phase FROM effects WHERE run_id = $1 ORDER BY attempt, phase',
      [runId],
    );
    return rows;
  }

  it('after the rescuer completed the step, the stale completion fails and rolls back', async () => {
    const c = controlled('fence_after');
    const slow = captureLogger();
    const a = slowWorker(c.wf, slow.logger);
    await a.start();
    const { runId } = await client.submit(c.wf, {});
    await c.started(1);

    // The rescuer sweeps the expired lease and runs attempt 2 to completion.
    const b = rescuer(c.wf);
    await b.start();
    await c.started(2);
    c.release(2);
    await waitFor('attempt 2 to complete the step', async () => {
      const run = await client.getRun(runId);
      return run.state === 'completed' ? run : undefined;
    });

    // Now the stale attempt 1 finishes and tries to complete.
    c.release(1);
    await c.returned(1);
    await waitFor('the slow worker to log the lost lease', () =>
      /lease lost|LeaseLost|LEASE_LOST/i.test(slow.text()),
    );

    const run = await client.getRun(runId);
    expect(run.state).toBe('completed');
    const step = run.steps[0];
    expect(step).toMatchObject({ state: 'completed', attempt: 2, output: { by: 2 } });
    expect(step?.errors.map((e) => [e.attempt, e.kind])).toEqual([[1, 'lease_expired']]);
    // Exactly the rescuer's writes committed; the slow worker's 'early' and 'late' rows rolled back.
    expect(await effects(runId)).toEqual([
      { attempt: 2, phase: 'early' },
      { attempt: 2, phase: 'late' },
    ]);
    // And the finished run never changes again.
    const again = await client.getRun(runId);
    expect(again.steps[0]?.output).toEqual({ by: 2 });
  });

  it('while the rescuer still runs attempt 2, the stale completion of attempt 1 is fenced out', async () => {
    const c = controlled('fence_during');
    const slow = captureLogger();
    const a = slowWorker(c.wf, slow.logger);
    await a.start();
    const { runId } = await client.submit(c.wf, {});
    await c.started(1);

    const b = rescuer(c.wf);
    await b.start();
    await c.started(2);

    // Attempt 2 is running (state 'running', attempt 2): attempt 1 completes now.
    c.release(1);
    await c.returned(1);
    await waitFor('the slow worker to log the lost lease', () =>
      /lease lost|LeaseLost|LEASE_LOST/i.test(slow.text()),
    );
    const mid = await client.getRun(runId);
    expect(mid.state).toBe('running');
    expect(mid.steps[0]).toMatchObject({ state: 'running', attempt: 2, output: null });
    expect(await effects(runId)).toEqual([]);

    c.release(2);
    const run = await client.waitForRun(runId, { timeoutMs: 20_000 });
    expect(run.state).toBe('completed');
    expect(run.steps[0]).toMatchObject({ state: 'completed', attempt: 2, output: { by: 2 } });
    expect(await effects(runId)).toEqual([
      { attempt: 2, phase: 'early' },
      { attempt: 2, phase: 'late' },
    ]);
    const { rows } = await db.pool.query<{ n: number }>(
      'SELECT count(*)::int AS n FROM effects WHERE run_id = $1 AND attempt = 1',
      [runId],
    );
    expect(rows[0]?.n).toBe(0);
  });

  it('a stale completion without a completionTx does not overwrite the output either', async () => {
    const release = deferred();
    const started = new Map<number, Deferred>([
      [1, deferred()],
      [2, deferred()],
    ]);
    const action = newAction(
      'plain_action',
      async (ctx) => {
        started.get(ctx.attempt)?.resolve();
        if (ctx.attempt === 1) await release.promise;
        return { by: ctx.attempt };
      },
      { maxAttempts: 5, backoff: () => 0 },
    );
    const wf = newWorkflow('fence_plain', { nodes: { only: { action } } });
    const slow = captureLogger();
    const a = slowWorker(wf, slow.logger);
    await a.start();
    const { runId } = await client.submit(wf, {});
    await started.get(1)?.promise;
    const b = rescuer(wf);
    await b.start();
    await started.get(2)?.promise;
    await client.waitForRun(runId, { timeoutMs: 20_000 });

    release.resolve();
    await waitFor('the slow worker to log the lost lease', () =>
      /lease lost|LeaseLost|LEASE_LOST/i.test(slow.text()),
    );
    const run = await client.getRun(runId);
    expect(run.steps[0]).toMatchObject({ state: 'completed', attempt: 2, output: { by: 2 } });
    expect(run.steps[0]?.errors.map((e) => e.kind)).toEqual(['lease_expired']);
  });
});
