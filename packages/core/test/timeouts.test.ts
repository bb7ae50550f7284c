/**
 * Action timeouts: `ctx.signal` is aborted with a StepTimeoutError; a cooperative handler stops;
 * one that ignores the signal keeps running, the step is retried, and the late handler's
 * completionTx writes and completion are fenced out.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { deferred } from '@cyclone/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  Client,
  LeaseLostError,
  newAction,
  newWorkflow,
  StepTimeoutError,
  Worker,
} from '../src/index.js';
import { createTestDb, type TestDb } from './support/db.js';

// A cooperative handler: waits on something that honours the signal.
const coop = {
  reason: undefined as unknown,
  settled: deferred<'rejected' | 'resolved'>(),
  ranPastSleep: false,
};
const cooperative = newAction(
  'cooperative',
  async (ctx) => {
    ctx.signal.addEventListener('abort', () => {
      coop.reason = ctx.signal.reason;
    });
    try {
      await sleep(60_000, undefined, { signal: ctx.signal });
      coop.ranPastSleep = true;
      coop.settled.resolve('resolved');
      return { late: true };
    } catch (err) {
      coop.settled.resolve('rejected');
      throw err;
    }
  },
  { timeout: 200, maxAttempts: 1 },
);
const Cooperative = newWorkflow('cooperative', { nodes: { only: { action: cooperative } } });

// A handler that ignores the signal on its first attempt.
const stubborn = {
  started1: deferred(),
  release1: deferred(),
  returned1: deferred(),
  reason1: undefined as unknown,
  abortedAtRelease: undefined as boolean | undefined,
  lateWrite: undefined as unknown,
  lateOpen: undefined as unknown,
};
const ignoresSignal = newAction(
  'ignores_signal',
  async (ctx) => {
    const tx = await ctx.completionTx();
    await tx.query('INSERT INTO effects (run_id, node, attempt, phase) VALUES ($1, $2, $3, $4)', [
      ctx.runId,
      ctx.node,
      ctx.attempt,
      'early',
    ]);
    if (ctx.attempt === 1) {
      ctx.signal.addEventListener('abort', () => {
        stubborn.reason1 = ctx.signal.reason;
      });
      stubborn.started1.resolve();
      await stubborn.release1.promise; // ignores ctx.signal
      stubborn.abortedAtRelease = ctx.signal.aborted;
      try {
        await tx.query(
          'INSERT INTO effects (run_id, node, attempt, phase) VALUES ($1, $2, $3, $4)',
          [ctx.runId, ctx.node, ctx.attempt, 'late'],
        );
        stubborn.lateWrite = 'committed?';
      } catch (err) {
        stubborn.lateWrite = err;
      }
      try {
        await ctx.completionTx();
        stubborn.lateOpen = 'opened';
      } catch (err) {
        stubborn.lateOpen = err;
      }
      stubborn.returned1.resolve();
    }
    return { by: ctx.attempt };
  },
  { timeout: 300, maxAttempts: 3, backoff: () => 0 },
);
const IgnoresSignal = newWorkflow('ignores_signal', {
  nodes: { only: { action: ignoresSignal } },
});

// A quick handler with a timeout: never aborted.
let quickAborted: boolean | undefined;
const quick = newAction(
  'quick',
  async (ctx) => {
    await sleep(5);
    quickAborted = ctx.signal.aborted;
    return { ok: true };
  },
  { timeout: 5_000 },
);
const Quick = newWorkflow('quick', { nodes: { only: { action: quick } } });

describe('timeouts', () => {
  let db: TestDb;
  let client: Client;
  let worker: Worker;

  beforeAll(async () => {
    db = await createTestDb();
    await db.pool.query(
      'CREATE TABLE effects (run_id uuid NOT NULL, node text NOT NULL, attempt int NOT NULL, phase text NOT NULL)',
    );
    client = new Client({ connectionString: db.url, poolSize: 4 });
    worker = new Worker({
      client,
      workflows: [Cooperative, IgnoresSignal, Quick],
      concurrency: 4,
      poolSize: 8,
      pollIntervalMs: 50,
    });
    await worker.start();
  });

  afterAll(async () => {
    stubborn.release1.resolve();
    await worker?.stop({ graceMs: 1_000 });
    await client?.close();
    await db?.drop();
  });

  it('aborts ctx.signal with a StepTimeoutError; a cooperative handler stops', async () => {
    const { runId } = await client.submit(Cooperative, {});
    const run = await client.waitForRun(runId, { timeoutMs: 20_000 });
    expect(await coop.settled.promise).toBe('rejected');
    expect(coop.ranPastSleep).toBe(false);
    expect(coop.reason).toBeInstanceOf(StepTimeoutError);
    expect((coop.reason as StepTimeoutError).timeoutMs).toBe(200);
    expect((coop.reason as StepTimeoutError).code).toBe('STEP_TIMEOUT');

    expect(run.state).toBe('failed');
    const step = run.steps[0];
    expect(step).toMatchObject({ state: 'discarded', attempt: 1, output: null });
    expect(step?.errors).toHaveLength(1);
    expect(step?.errors[0]).toMatchObject({ attempt: 1, kind: 'timeout' });
    expect(step?.errors[0]?.message).toMatch(/timed out|timeout/i);
  });

  it('a handler that ignores the signal keeps running; the retry wins and the late call is fenced out', async () => {
    const { runId } = await client.submit(IgnoresSignal, {});
    await stubborn.started1.promise;

    // Attempt 1 times out and is retried while its handler is still running.
    const run = await client.waitForRun(runId, { timeoutMs: 20_000 });
    expect(run.state).toBe('completed');
    expect(run.steps[0]).toMatchObject({ state: 'completed', attempt: 2, output: { by: 2 } });
    expect(run.steps[0]?.errors.map((e) => [e.attempt, e.kind])).toEqual([[1, 'timeout']]);
    expect(stubborn.reason1).toBeInstanceOf(StepTimeoutError);

    // Now the first call goes on: its signal is aborted, its transaction is gone.
    stubborn.release1.resolve();
    await stubborn.returned1.promise;
    expect(stubborn.abortedAtRelease).toBe(true);
    expect(stubborn.lateWrite).toBeInstanceOf(LeaseLostError);
    expect(stubborn.lateOpen).toBeInstanceOf(LeaseLostError);
    expect((stubborn.lateWrite as LeaseLostError).attempt).toBe(1);

    // Its return value did not complete anything: the step is as attempt 2 left it.
    const after = await client.getRun(runId);
    expect(after.steps[0]).toMatchObject({ state: 'completed', attempt: 2, output: { by: 2 } });
    const { rows } = await db.pool.query<{ attempt: number; phase: string }>(
      'SELECT attempt, phase FROM effects WHERE run_id = $1 ORDER BY attempt, phase',
      [runId],
    );
    // Attempt 1's 'early' row (written before the timeout) rolled back; its 'late' row never
    // reached the database; attempt 2's row committed with the completion.
    expect(rows).toEqual([{ attempt: 2, phase: 'early' }]);
  });

  it('a handler that finishes in time is not aborted', async () => {
    const { runId } = await client.submit(Quick, {});
    const run = await client.waitForRun(runId, { timeoutMs: 20_000 });
    expect(run.state).toBe('completed');
    expect(run.steps[0]?.errors).toEqual([]);
    expect(quickAborted).toBe(false);
  });
});
