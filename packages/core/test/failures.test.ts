/**
 * Handler failures: whatever a handler throws or rejects with (Error or not, sync or async) is
 * recorded for its attempt and retried after the backoff; exhausted attempts and
 * NonRetryableError discard the step; a run with nothing left that can progress fails while its
 * downstream stays pending; a completionTx is rolled back when the handler throws.
 */
import { deferred, waitFor } from '@cyclone/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  Client,
  NonRetryableError,
  newAction,
  newWorkflow,
  type RunInfo,
  type StepInfo,
  Worker,
} from '../src/index.js';
import { createTestDb, type TestDb } from './support/db.js';

const calls = new Map<string, number>();
const called = (ctx: { runId: string; node: string }) => {
  const k = `${ctx.runId}:${ctx.node}`;
  calls.set(k, (calls.get(k) ?? 0) + 1);
};
const callsOf = (runId: string, node: string) => calls.get(`${runId}:${node}`) ?? 0;

// 1. A thrown Error with a long backoff: stays retryable, scheduled a minute later.
const slowBackoff = newAction(
  'slow_backoff',
  async (ctx) => {
    called(ctx);
    throw new Error('boom-with-backoff');
  },
  { maxAttempts: 3, backoff: () => 60_000 },
);
const SlowBackoff = newWorkflow('slow_backoff', { nodes: { only: { action: slowBackoff } } });

// 2. Every way of failing, each retried once (backoff 0), then discarded.
type How =
  | 'error'
  | 'string'
  | 'object'
  | 'undefined'
  | 'null'
  | 'number'
  | 'sync'
  | 'reject_error'
  | 'reject_string'
  | 'nul_message'
  | 'huge_message';
const backoffArgs: number[] = [];
const thrower = newAction(
  'thrower',
  (ctx, input: { how: How }): Promise<unknown> | unknown => {
    called(ctx);
    switch (input.how) {
      case 'error':
        return (async () => {
          throw new Error('async-boom');
        })();
      case 'string':
        return (async () => {
          throw 'a plain string';
        })();
      case 'object':
        return (async () => {
          throw { reason: 'object-thrown', code: 42 };
        })();
      case 'undefined':
        return (async () => {
          throw undefined;
        })();
      case 'null':
        return (async () => {
          throw null;
        })();
      case 'number':
        return (async () => {
          throw 1234;
        })();
      case 'sync':
        throw new Error('sync-boom');
      case 'reject_error':
        return Promise.reject(new Error('rejected-boom'));
      case 'reject_string':
        return Promise.reject('rejected-string');
      case 'nul_message':
        throw new Error('nul-before\u0000nul-after');
      case 'huge_message':
        throw new Error(`huge-${'x'.repeat(1_000_000)}`);
    }
  },
  {
    maxAttempts: 2,
    backoff: (attempt) => {
      backoffArgs.push(attempt);
      return 0;
    },
  },
);
const Thrower = newWorkflow('thrower', { nodes: { only: { action: thrower } } });

// 3. A node-level maxAttempts overrides the action's.
const alwaysFails = newAction(
  'always_fails',
  async (ctx) => {
    called(ctx);
    throw new Error(`fail ${ctx.attempt}`);
  },
  { maxAttempts: 1, backoff: () => 0 },
);
const NodeOverride = newWorkflow('node_override', {
  nodes: { only: { action: alwaysFails, maxAttempts: 3 } },
});

// 4. NonRetryableError: discarded at the first attempt.
const nonRetryable = newAction(
  'non_retryable',
  async (ctx) => {
    called(ctx);
    throw new NonRetryableError('card declined for good');
  },
  { maxAttempts: 10, backoff: () => 0 },
);
const NonRetryable = newWorkflow('non_retryable', { nodes: { only: { action: nonRetryable } } });

// 5. A run fails once nothing can progress; downstream nodes stay pending.
const gateB = deferred();
const ok = newAction('ok', async (ctx) => {
  called(ctx);
  if (ctx.node === 'b') await gateB.promise;
  return { node: ctx.node };
});
const Partial = newWorkflow('partial', {
  nodes: {
    root: { action: ok },
    a: { action: nonRetryable, after: ['root'] },
    b: { action: ok, after: ['root'] },
    c: { action: ok, after: ['a'] },
    j: { action: ok, after: ['a', 'b'] },
  },
});

// 6. completionTx writes are rolled back when the handler throws.
const writesThenThrows = newAction(
  'writes_then_throws',
  async (ctx, input: { succeedAt: number }) => {
    called(ctx);
    const tx = await ctx.completionTx();
    await tx.query('INSERT INTO effects (run_id, node, attempt) VALUES ($1, $2, $3)', [
      ctx.runId,
      ctx.node,
      ctx.attempt,
    ]);
    if (ctx.attempt < input.succeedAt)
      throw new Error(`fail after writing, attempt ${ctx.attempt}`);
    return { attempt: ctx.attempt };
  },
  { maxAttempts: 3, backoff: () => 0 },
);
const WritesThenThrows = newWorkflow('writes_then_throws', {
  nodes: { only: { action: writesThenThrows } },
});

describe('handler failures', () => {
  let db: TestDb;
  let client: Client;
  let worker: Worker;

  beforeAll(async () => {
    db = await createTestDb();
    await db.pool.query(
      'CREATE TABLE effects (run_id uuid NOT NULL, node text NOT NULL, attempt int NOT NULL)',
    );
    client = new Client({ connectionString: db.url, poolSize: 4 });
    worker = new Worker({
      client,
      workflows: [SlowBackoff, Thrower, NodeOverride, NonRetryable, Partial, WritesThenThrows],
      concurrency: 8,
      poolSize: 10,
      pollIntervalMs: 50,
    });
    await worker.start();
  });

  afterAll(async () => {
    gateB.resolve();
    await worker?.stop({ graceMs: 1_000 });
    await client?.close();
    await db?.drop();
  });

  const only = (run: RunInfo): StepInfo => run.steps[0] as StepInfo;

  it('a thrown Error is recorded for its attempt and the step is retryable after the backoff', async () => {
    const { runId } = await client.submit(SlowBackoff, {});
    const run = await waitFor('the first failure to be recorded', async () => {
      const r = await client.getRun(runId);
      return only(r).state === 'retryable' ? r : undefined;
    });
    const step = only(run);
    expect(run.state).toBe('running');
    expect(step.attempt).toBe(1);
    expect(step.errors).toHaveLength(1);
    const e = step.errors[0];
    expect(e).toMatchObject({ attempt: 1, kind: 'error', message: 'boom-with-backoff' });
    expect(e?.stack).toContain('boom-with-backoff');
    const at = Date.parse(e?.at ?? '');
    expect(Number.isNaN(at)).toBe(false);
    // The backoff (60 s) moved scheduled_at: the next attempt is a minute away, not now.
    const delay = step.scheduledAt.getTime() - at;
    expect(delay).toBeGreaterThan(55_000);
    expect(delay).toBeLessThan(65_000);
    expect(step.leaseOwner).toBeNull();
    expect(step.leaseExpiresAt).toBeNull();
    // It is not claimable yet: the claim query sees nothing due.
    const { rows } = await db.pool.query(
      `SELECT 1 FROM cyclone.cyclone_steps WHERE run_id = $1 AND scheduled_at <= now()`,
      [runId],
    );
    expect(rows).toHaveLength(0);
    expect(callsOf(runId, 'only')).toBe(1);
  });

  it.each([
    ['error', /async-boom/, true],
    ['sync', /sync-boom/, true],
    ['reject_error', /rejected-boom/, true],
    ['string', /a plain string/, false],
    ['reject_string', /rejected-string/, false],
    ['object', /object-thrown.*42|42.*object-thrown/, false],
    ['number', /1234/, false],
    ['undefined', /undefined/, false],
    ['null', /null/, false],
    ['nul_message', /nul-before/, false],
    ['huge_message', /^huge-x+/, false],
  ] as [How, RegExp, boolean][])(
    'a handler failing with %s is retried, then discarded when attempts run out',
    async (how, message, hasStack) => {
      const { runId } = await client.submit(Thrower, { how });
      const run = await client.waitForRun(runId, { timeoutMs: 20_000 });
      expect(run.state).toBe('failed');
      expect(run.completedAt).toBeInstanceOf(Date);
      const step = only(run);
      expect(step).toMatchObject({ state: 'discarded', attempt: 2, maxAttempts: 2, output: null });
      expect(step.errors.map((e) => [e.attempt, e.kind])).toEqual([
        [1, 'error'],
        [2, 'error'],
      ]);
      for (const e of step.errors) {
        expect(typeof e.message).toBe('string');
        // Stored, but bounded: a huge message does not bloat the row.
        expect(e.message.length).toBeLessThan(100_000);
        expect(e.message).toMatch(message);
        if (hasStack) expect(e.stack).toMatch(message);
      }
      expect(callsOf(runId, 'only')).toBe(2);
    },
  );

  it('the backoff is asked with the attempt that failed', () => {
    // Every thrower run above failed attempts 1 and 2: the backoff saw both, never 0 or 3.
    expect(backoffArgs.length).toBeGreaterThanOrEqual(11);
    expect(new Set(backoffArgs)).toContain(1);
    expect(backoffArgs.every((a) => a === 1 || a === 2)).toBe(true);
  });

  it("a node's maxAttempts overrides its action's", async () => {
    const { runId } = await client.submit(NodeOverride, {});
    const run = await client.waitForRun(runId, { timeoutMs: 20_000 });
    expect(run.state).toBe('failed');
    expect(only(run)).toMatchObject({ state: 'discarded', attempt: 3, maxAttempts: 3 });
    expect(only(run).errors.map((e) => e.message)).toEqual(['fail 1', 'fail 2', 'fail 3']);
    expect(callsOf(runId, 'only')).toBe(3);
  });

  it('NonRetryableError discards the step at once', async () => {
    const { runId } = await client.submit(NonRetryable, {});
    const run = await client.waitForRun(runId, { timeoutMs: 20_000 });
    expect(run.state).toBe('failed');
    const step = only(run);
    expect(step).toMatchObject({ state: 'discarded', attempt: 1, maxAttempts: 10 });
    expect(step.errors).toHaveLength(1);
    expect(step.errors[0]).toMatchObject({
      attempt: 1,
      kind: 'non_retryable',
      message: 'card declined for good',
    });
    expect(callsOf(runId, 'only')).toBe(1);
  });

  it('the run fails only once nothing can progress, and downstream nodes stay pending', async () => {
    const { runId } = await client.submit(Partial, {});
    const mid = await waitFor('a discarded while b runs', async () => {
      const r = await client.getRun(runId);
      const st = (n: string) => r.steps.find((s) => s.node === n)?.state;
      return st('a') === 'discarded' && st('b') === 'running' ? r : undefined;
    });
    // b can still complete: the run is not failed yet.
    expect(mid.state).toBe('running');
    expect(mid.completedAt).toBeNull();

    gateB.resolve();
    const run = await client.waitForRun(runId, { timeoutMs: 20_000 });
    expect(run.state).toBe('failed');
    expect(run.completedAt).toBeInstanceOf(Date);
    const st = Object.fromEntries(run.steps.map((s) => [s.node, s.state]));
    expect(st).toEqual({
      root: 'completed',
      a: 'discarded',
      b: 'completed',
      c: 'pending',
      j: 'pending',
    });
    const j = run.steps.find((s) => s.node === 'j');
    expect(j).toMatchObject({ depsRemaining: 1, attempt: 0 });
    expect(callsOf(runId, 'c') + callsOf(runId, 'j')).toBe(0);
    const { rows } = await db.pool.query(
      'SELECT steps_remaining, steps_active FROM cyclone.cyclone_runs WHERE id = $1',
      [runId],
    );
    expect(rows[0]).toEqual({ steps_remaining: 3, steps_active: 0 });
  });

  it('a completionTx write is rolled back when the handler throws', async () => {
    // Fails at attempts 1 and 2 after writing, succeeds at 3: only attempt 3's row stays.
    const { runId: recovers } = await client.submit(WritesThenThrows, { succeedAt: 3 });
    // Fails at every attempt after writing: no row at all.
    const { runId: never } = await client.submit(WritesThenThrows, { succeedAt: 99 });
    const r1 = await client.waitForRun(recovers, { timeoutMs: 20_000 });
    const r2 = await client.waitForRun(never, { timeoutMs: 20_000 });
    expect(r1.state).toBe('completed');
    expect(only(r1)).toMatchObject({ state: 'completed', attempt: 3, output: { attempt: 3 } });
    expect(only(r1).errors.map((e) => e.attempt)).toEqual([1, 2]);
    expect(r2.state).toBe('failed');
    expect(only(r2)).toMatchObject({ state: 'discarded', attempt: 3 });

    const { rows } = await db.pool.query<{ run_id: string; attempt: number }>(
      'SELECT run_id, attempt FROM effects WHERE run_id = ANY($1::uuid[])',
      [[recovers, never]],
    );
    expect(rows).toEqual([{ run_id: recovers, attempt: 3 }]);
    expect(callsOf(recovers, 'only')).toBe(3);
    expect(callsOf(never, 'only')).toBe(3);
  });
});
