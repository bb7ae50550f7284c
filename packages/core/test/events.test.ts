/**
 * Events and branches: signals stored durably per run, wait nodes that complete with the signal
 * or time out (exactly one of the two, whatever the interleaving), conditional nodes that end
 * `skipped`, and cancellation of a run that waits. Real PostgreSQL, in-process workers.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  Client,
  InvalidSignalError,
  InvalidStateError,
  MAX_SIGNAL_NAME_LENGTH,
  newAction,
  newWorkflow,
  RunNotFoundError,
  Worker,
  WorkflowDefinitionError,
} from '../src/index.js';
import { createTestDb, type TestDb } from './support/db.js';

let db: TestDb;
let client: Client;
let worker: Worker;

const Echo = newAction('ev_echo', async (ctx) => ({ node: ctx.node }));
type Up = { approval?: { timedOut?: boolean; by?: string } };
const Approval = newWorkflow<{ order: string }>('ev_approval', {
  nodes: {
    charge: { action: Echo },
    approval: { waitFor: 'approved', after: ['charge'], timeoutMs: 60_000 },
    ship: {
      action: Echo,
      after: ['approval'],
      when: (_run, up) => !(up as Up).approval?.timedOut,
    },
    refund: {
      action: Echo,
      after: ['approval'],
      when: (_run, up) => !!(up as Up).approval?.timedOut,
    },
  },
});
const Short = newWorkflow('ev_short', {
  nodes: {
    approval: { waitFor: 'approved', timeoutMs: 300 },
    ship: { action: Echo, after: ['approval'], when: (_r, up) => !(up as Up).approval?.timedOut },
    refund: {
      action: Echo,
      after: ['approval'],
      when: (_r, up) => !!(up as Up).approval?.timedOut,
    },
  },
});
let gate: Promise<void> = Promise.resolve();
const Gated = newAction('ev_gated', async () => {
  await gate;
  return null;
});
const Early = newWorkflow('ev_early', {
  nodes: {
    first: { action: Gated },
    approval: { waitFor: 'approved', after: ['first'] },
  },
});
const Throws = newWorkflow('ev_throws', {
  nodes: {
    only: {
      action: Echo,
      when: () => {
        throw new Error('no way to decide');
      },
    },
  },
});
const Race = newWorkflow('ev_race', {
  nodes: {
    first: { action: Echo },
    go: { waitFor: 'go', after: ['first'], timeoutMs: 30 },
    after: { action: Echo, after: ['go'] },
  },
});
let slowStarted: () => void = () => {};
let slowAborted = false;
const Slow = newAction('ev_slow', async (ctx) => {
  const tx = await ctx.completionTx();
  await tx.query('INSERT INTO ev_rows (run_id) VALUES ($1)', [ctx.runId]);
  slowStarted();
  await new Promise((_, reject) =>
    ctx.signal.addEventListener('abort', () => {
      slowAborted = true;
      reject(ctx.signal.reason);
    }),
  );
});
const Cancellable = newWorkflow('ev_cancel', {
  nodes: {
    wait: { waitFor: 'never-sent' },
    slow: { action: Slow },
    last: { action: Echo, after: ['wait', 'slow'] },
  },
});
type Order = { amount: number };
const Threshold = newWorkflow<Order>('ev_threshold', {
  nodes: {
    charge: { action: Echo },
    approval: {
      waitFor: 'approved',
      after: ['charge'],
      timeoutMs: 60_000,
      when: (run) => (run as Order).amount > 1_000,
    },
    ship: { action: Echo, after: ['approval'] },
  },
});
const RootWait = newWorkflow('ev_root_wait', {
  nodes: {
    approval: { waitFor: 'approved' },
    ship: { action: Echo, after: ['approval'] },
  },
});
const ALL = [Approval, Short, Early, Throws, Race, Cancellable, Threshold, RootWait];

beforeAll(async () => {
  db = await createTestDb();
  client = new Client({ connectionString: db.url, poolSize: 8 });
  worker = new Worker({ client, workflows: ALL, concurrency: 10, pollIntervalMs: 200 });
  await worker.start();
});
afterAll(async () => {
  await worker?.stop({ graceMs: 1_000 });
  await client?.close();
  await db?.drop();
});

const stateOf = (run: Awaited<ReturnType<Client['getRun']>>, node: string) =>
  run.steps.find((s) => s.node === node);

describe('signals and wait nodes', () => {
  it('a wait node completes with the signal; the branch that needs it runs, the other is skipped', async () => {
    const { runId } = await client.submit(Approval, { order: 'o-1' });
    // Waits without a worker: the charge completes, the approval waits `scheduled`.
    await expect
      .poll(async () => stateOf(await client.getRun(runId), 'approval')?.state, { timeout: 5_000 })
      .toBe('scheduled');
    expect(await client.signal(runId, 'approved', { by: 'alice' })).toEqual({
      accepted: true,
      waitingNodes: ['approval'],
    });
    const run = await client.waitForRun(runId, { timeoutMs: 10_000, pollMs: 50 });
    expect(run.state).toBe('completed');
    expect(stateOf(run, 'approval')?.output).toEqual({ by: 'alice' });
    expect(stateOf(run, 'ship')?.state).toBe('completed');
    expect(stateOf(run, 'refund')?.state).toBe('skipped');
    // The first signal stood; the run is finished now.
    await expect(client.signal(runId, 'approved', { by: 'bob' })).rejects.toThrow(
      InvalidStateError,
    );
  });

  it('a signal sent before the wait node is reached is delivered when it is; a second is refused', async () => {
    let open!: () => void;
    gate = new Promise((r) => {
      open = r;
    });
    const { runId } = await client.submit(Early, {});
    expect(await client.signal(runId, 'approved', { n: 1 })).toEqual({
      accepted: true,
      waitingNodes: ['approval'],
    });
    expect(await client.signal(runId, 'approved', { n: 2 })).toEqual({
      accepted: false,
      waitingNodes: ['approval'],
    });
    open();
    const run = await client.waitForRun(runId, { timeoutMs: 10_000, pollMs: 50 });
    expect(run.state).toBe('completed');
    expect(stateOf(run, 'approval')?.output).toEqual({ n: 1 });
  });

  it('a timed-out wait completes once with { timedOut: true } and never waits again', async () => {
    const { runId } = await client.submit(Short, {});
    const run = await client.waitForRun(runId, { timeoutMs: 10_000, pollMs: 50 });
    expect(run.state).toBe('completed');
    const approval = stateOf(run, 'approval');
    expect(approval?.output).toEqual({ timedOut: true });
    // Claimed when reached (it parks) and at its deadline (it resolves): no error, no snooze.
    expect(approval?.attempt).toBe(2);
    expect(approval?.errors).toEqual([]);
    expect(approval?.snoozes).toBe(0);
    expect(stateOf(run, 'refund')?.state).toBe('completed');
    expect(stateOf(run, 'ship')?.state).toBe('skipped');
    await expect(client.signal(runId, 'approved', {})).rejects.toThrow(InvalidStateError);
    expect(stateOf(await client.getRun(runId), 'approval')?.output).toEqual({ timedOut: true });
  });

  it('a wait holds no worker: a stopped fleet and a new worker change nothing', async () => {
    const { runId } = await client.submit(Approval, { order: 'o-2' });
    await expect
      .poll(async () => stateOf(await client.getRun(runId), 'approval')?.state, { timeout: 5_000 })
      .toBe('scheduled');
    expect(worker.running).toBe(0);
    await worker.stop({ graceMs: 1_000 });
    expect(await client.signal(runId, 'approved', { by: 'carol' })).toEqual({
      accepted: true,
      waitingNodes: ['approval'],
    });
    worker = new Worker({ client, workflows: ALL, concurrency: 10, pollIntervalMs: 200 });
    await worker.start();
    const run = await client.waitForRun(runId, { timeoutMs: 10_000, pollMs: 50 });
    expect(stateOf(run, 'approval')?.output).toEqual({ by: 'carol' });
    expect(stateOf(run, 'ship')?.state).toBe('completed');
  });

  it('refuses bad signals with a typed error and writes nothing', async () => {
    const { runId } = await client.submit(Approval, { order: 'o-3' });
    const count = async () =>
      Number(
        (
          await client.pool.query(
            'SELECT count(*) AS n FROM cyclone.cyclone_signals WHERE run_id = $1',
            [runId],
          )
        ).rows[0].n,
      );
    for (const name of [
      '',
      'x'.repeat(MAX_SIGNAL_NAME_LENGTH + 1),
      'a\u0000b',
      5 as unknown as string,
    ]) {
      await expect(client.signal(runId, name, {})).rejects.toThrow(InvalidSignalError);
    }
    await expect(client.signal(runId, 'approved', { f: () => 1 })).rejects.toThrow(
      InvalidSignalError,
    );
    await expect(client.signal(runId, 'approved', 'x'.repeat(2 * 1024 * 1024))).rejects.toThrow(
      InvalidSignalError,
    );
    await expect(
      client.signal('00000000-0000-7000-8000-000000000000', 'approved', {}),
    ).rejects.toThrow(RunNotFoundError);
    await expect(client.signal('not-a-uuid', 'approved', {})).rejects.toThrow(RunNotFoundError);
    expect(await count()).toBe(0);
    // In a caller's transaction that rolls back: nothing either.
    const c = await client.pool.connect();
    try {
      await c.query('BEGIN');
      expect(await client.signal(runId, 'approved', {}, { tx: c })).toEqual({
        accepted: true,
        waitingNodes: ['approval'],
      });
      await c.query('ROLLBACK');
    } finally {
      c.release();
    }
    expect(await count()).toBe(0);
    await client.cancel(runId);
  });

  it('refuses bad wait and conditional nodes at definition', () => {
    const bad = [
      { w: { waitFor: '' } },
      { w: { waitFor: 'x'.repeat(MAX_SIGNAL_NAME_LENGTH + 1) } },
      { w: { waitFor: 'ok', timeoutMs: -1 } },
      { w: { waitFor: 'ok', timeoutMs: Number.NaN } },
      { w: { waitFor: 'ok', action: Echo } },
      { w: { waitFor: 'ok', delayMs: 5 } },
      { w: { action: Echo, when: true } },
    ];
    for (const nodes of bad) {
      expect(
        () => newWorkflow('ev_bad', { nodes } as unknown as Parameters<typeof newWorkflow>[1]),
        JSON.stringify(nodes),
      ).toThrow(WorkflowDefinitionError);
    }
  });
});

describe('signals and delayed runs', () => {
  it('an early signal does not start a delayed run whose root is a wait node', async () => {
    const { runId } = await client.submit(RootWait, {}, { delayMs: 1_500 });
    expect(await client.signal(runId, 'approved', { ok: 1 })).toEqual({
      accepted: true,
      waitingNodes: ['approval'],
    });
    const run = await client.waitForRun(runId, { timeoutMs: 10_000, pollMs: 50 });
    const approval = stateOf(run, 'approval');
    expect(approval?.output).toEqual({ ok: 1 });
    const startedAt = approval?.startedAt;
    if (!approval || !startedAt) throw new Error('approval never started');
    // Reached at the run's time, not at the signal.
    expect(startedAt.getTime()).toBeGreaterThanOrEqual(approval.scheduledAt.getTime());
    expect(startedAt.getTime() - run.createdAt.getTime()).toBeGreaterThanOrEqual(1_400);
  });

  it('signals and cancels of the same runs at once: each signal is taken or refused, never a deadlock', async () => {
    const ids = (
      await client.submitMany(
        Approval,
        Array.from({ length: 60 }, () => ({ order: 'x' })),
      )
    ).runIds;
    await new Promise((r) => setTimeout(r, 300));
    // Both may win: a signal taken first can let the worker finish the run before the cancel's
    // transaction, which then refuses a completed run.
    const outcomes = await Promise.all(
      ids.map(async (runId) => {
        const [signal, cancel] = await Promise.allSettled([
          client.signal(runId, 'approved', { by: 'race' }),
          client.cancel(runId),
        ]);
        const taken =
          signal.status === 'fulfilled'
            ? 'accepted'
            : signal.reason instanceof InvalidStateError
              ? 'refused'
              : String(signal.reason);
        const cancelled =
          cancel.status === 'fulfilled'
            ? 'cancelled'
            : cancel.reason instanceof InvalidStateError
              ? 'too late'
              : String(cancel.reason);
        return { runId, taken, cancelled };
      }),
    );
    expect(outcomes.filter((o) => o.taken !== 'accepted' && o.taken !== 'refused')).toEqual([]);
    expect(
      outcomes.filter((o) => o.cancelled !== 'cancelled' && o.cancelled !== 'too late'),
    ).toEqual([]);
    for (const { runId, taken, cancelled } of outcomes) {
      const state = (await client.getRun(runId)).state;
      if (cancelled === 'cancelled') expect(state).toBe('cancelled');
      else expect([taken, state]).toEqual(['accepted', 'completed']);
    }
  });
});

describe('cancellation', () => {
  it('cancel ends a pending wait and aborts a handler on its completionTx, whose rows roll back', async () => {
    await client.pool.query('CREATE TABLE IF NOT EXISTS ev_rows (run_id uuid)');
    const started = new Promise<void>((r) => {
      slowStarted = r;
    });
    const { runId } = await client.submit(Cancellable, {});
    await started;
    await expect
      .poll(async () => stateOf(await client.getRun(runId), 'wait')?.state, { timeout: 5_000 })
      .toBe('scheduled');
    await client.cancel(runId);
    // The handler learns at its next heartbeat (a third of the 5 s lease).
    await expect.poll(() => slowAborted, { timeout: 10_000 }).toBe(true);
    await expect
      .poll(async () => (await client.pool.query('SELECT 1 FROM ev_rows')).rowCount, {
        timeout: 5_000,
      })
      .toBe(0);
    await expect(client.signal(runId, 'never-sent', {})).rejects.toThrow(InvalidStateError);
    await new Promise((r) => setTimeout(r, 500));
    const run = await client.getRun(runId);
    expect(run.state).toBe('cancelled');
    expect(run.steps.map((s) => [s.node, s.state])).toEqual(
      expect.arrayContaining([
        ['wait', 'cancelled'],
        ['slow', 'cancelled'],
        ['last', 'cancelled'],
      ]),
    );
    expect(stateOf(run, 'last')?.startedAt).toBeNull();
    expect((await client.pool.query('SELECT 1 FROM ev_rows')).rowCount).toBe(0);
  });
});

describe('conditional nodes', () => {
  it('a wait node whose condition is false is skipped when reached, not at its timeout', async () => {
    const small = await client.submit(Threshold, { amount: 50 });
    const run = await client.waitForRun(small.runId, { timeoutMs: 10_000, pollMs: 50 });
    expect(run.state).toBe('completed');
    expect(stateOf(run, 'approval')?.state).toBe('skipped');
    expect(stateOf(run, 'ship')?.state).toBe('completed');
    // A large order waits for its approval, then ships.
    const large = await client.submit(Threshold, { amount: 5_000 });
    await expect
      .poll(async () => stateOf(await client.getRun(large.runId), 'approval')?.state, {
        timeout: 5_000,
      })
      .toBe('scheduled');
    await client.signal(large.runId, 'approved', { by: 'ops' });
    const approved = await client.waitForRun(large.runId, { timeoutMs: 10_000, pollMs: 50 });
    expect(stateOf(approved, 'approval')?.output).toEqual({ by: 'ops' });
    expect(stateOf(approved, 'approval')?.snoozes).toBe(0);
    expect(stateOf(approved, 'ship')?.state).toBe('completed');
  });

  it('a condition that throws discards the node with an error saying so', async () => {
    const { runId } = await client.submit(Throws, {});
    const run = await client.waitForRun(runId, { timeoutMs: 10_000, pollMs: 50 });
    expect(run.state).toBe('failed');
    const only = stateOf(run, 'only');
    expect(only?.state).toBe('discarded');
    expect(only?.errors.map((e) => e.kind)).toEqual(['condition_error']);
    expect(only?.errors[0]?.message).toMatch(/condition \(when\) of node 'only' threw: no way/);
  });
});

describe('the race between a signal, the node becoming ready and the timeout', () => {
  it('1,000 runs with random delays: each ends with exactly one outcome and none hangs', async () => {
    const N = 1_000;
    const outcomes: { runId: string; sent: boolean }[] = [];
    for (let batch = 0; batch < N / 100; batch++) {
      const ids = (
        await client.submitMany(
          Race,
          Array.from({ length: 100 }, () => ({})),
        )
      ).runIds;
      await Promise.all(
        ids.map(async (runId) => {
          // Before, around and after the node is reached, and around its 30 ms deadline.
          await new Promise((r) => setTimeout(r, Math.random() * 80));
          try {
            const r = await client.signal(runId, 'go', { runId });
            outcomes.push({ runId, sent: r.accepted });
          } catch (err) {
            // The run finished first (timed out and completed): the signal is refused.
            expect(err).toBeInstanceOf(InvalidStateError);
            outcomes.push({ runId, sent: false });
          }
        }),
      );
    }
    const ids = outcomes.map((o) => o.runId);
    const deadline = Date.now() + 60_000;
    for (;;) {
      const { rows } = await client.pool.query(
        "SELECT count(*)::int AS n FROM cyclone.cyclone_runs WHERE workflow = 'ev_race' AND state <> 'completed'",
      );
      if (rows[0].n === 0) break;
      expect(Date.now(), `${rows[0].n} runs still not completed`).toBeLessThan(deadline);
      await new Promise((r) => setTimeout(r, 100));
    }
    const { rows } = await client.pool.query(
      `SELECT st.run_id, st.output, st.attempt, s.created_at AS sent_at,
              s.created_at > st.wait_deadline AS sent_after_deadline
       FROM cyclone.cyclone_steps st
       LEFT JOIN cyclone.cyclone_signals s ON s.run_id = st.run_id AND s.name = 'go'
       WHERE st.run_id = ANY($1::uuid[]) AND st.node = 'go'`,
      [ids],
    );
    expect(rows).toHaveLength(N);
    let delivered = 0;
    let timedOut = 0;
    for (const r of rows) {
      if (r.output?.timedOut === true) {
        timedOut++;
        // Timed out: no signal, or one sent after the deadline.
        // (Compared in SQL: the timestamps have microseconds, a Date only milliseconds.)
        if (r.sent_at) expect(r.sent_after_deadline).toBe(true);
      } else {
        delivered++;
        expect(r.output).toEqual({ runId: r.run_id });
        expect(r.sent_after_deadline).toBe(false);
      }
    }
    expect(delivered + timedOut).toBe(N);
    console.log(`race: ${delivered} delivered, ${timedOut} timed out, of ${N}`);
    // Both outcomes happened, so the loop exercised both sides of the race.
    expect(delivered).toBeGreaterThan(0);
    expect(timedOut).toBeGreaterThan(0);
  }, 120_000);
});
