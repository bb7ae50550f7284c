/**
 * Flow control in one process (docs/flow-control.md): priorities, a key function that fails,
 * limits together with retries, snoozes, completionTx, cancel and operator retry (a DAG of
 * limited nodes completes), bad limits and priorities refused with nothing written, and
 * listLimits / `cyclone limits`. The races between worker processes are in
 * flow-control.processes.test.ts.
 */
import { deferred, waitFor } from '@cyclone/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { main } from '../src/cli.js';
import {
  Client,
  InputValidationError,
  NonRetryableError,
  newAction,
  newWorkflow,
  SnoozeError,
  Worker,
  WorkflowDefinitionError,
} from '../src/index.js';
import { createTestDb, type TestDb } from './support/db.js';

let db: TestDb;
let client: Client;
const workers: Worker[] = [];

beforeAll(async () => {
  db = await createTestDb();
  client = new Client({ connectionString: db.url, poolSize: 4 });
  await client.pool.query('CREATE TABLE effects (run_id uuid, node text, attempt int)');
});

afterAll(async () => {
  for (const w of workers) await w.stop({ graceMs: 1_000 });
  await client?.close();
  await db?.drop();
});

async function startWorker(options: ConstructorParameters<typeof Worker>[0]): Promise<Worker> {
  const w = new Worker({ pollIntervalMs: 100, ...options });
  workers.push(w);
  await w.start();
  return w;
}

async function runsCount(): Promise<number> {
  const { rows } = await client.pool.query('SELECT count(*)::int AS n FROM cyclone.cyclone_runs');
  return rows[0].n;
}

describe('priorities', () => {
  const order: { name: string; p: number }[] = [];
  const Plain = newAction('prio_plain', async (_ctx, i: { name: string; p: number }) => {
    order.push(i);
    await new Promise((r) => setTimeout(r, 30));
  });
  const Limited = newAction(
    'prio_limited',
    async (_ctx, i: { name: string; p: number }) => {
      order.push(i);
      await new Promise((r) => setTimeout(r, 30));
    },
    { concurrency: { limit: 1 } },
  );
  const PlainWf = newWorkflow('prio_plain', { nodes: { only: { action: Plain } } });
  const LimitedWf = newWorkflow('prio_limited', { nodes: { only: { action: Limited } } });

  for (const [what, wf] of [
    ['the plain claim', PlainWf],
    ['the limited claim', LimitedWf],
  ] as const) {
    it(`${what}: later high-priority runs start before the rest of a low-priority backlog`, async () => {
      order.length = 0;
      const low = await client.submitMany(
        wf,
        Array.from({ length: 20 }, (_, n) => ({ name: `low${n}`, p: 0 })),
      );
      const w = await startWorker({ client, workflows: [wf], concurrency: 1 });
      await waitFor('the backlog to start', () => order.length >= 2);
      const startedBefore = order.length;
      const high = await client.submitMany(
        wf,
        Array.from({ length: 5 }, (_, n) => ({ name: `high${n}`, p: 10 })),
        { priority: 10 },
      );
      for (const id of [...low.runIds, ...high.runIds]) {
        expect((await client.waitForRun(id, { timeoutMs: 30_000 })).state).toBe('completed');
      }
      const lastHigh = Math.max(...order.map((o, i) => (o.p === 10 ? i : -1)));
      // At most one low step was already claimed when the high ones came.
      expect(lastHigh).toBeLessThanOrEqual(startedBefore + 5);
      expect(order.filter((o) => o.p === 0)).toHaveLength(20);
      expect((await client.getRun(high.runIds[0] as string)).steps[0]?.priority).toBe(10);
      await w.stop({ graceMs: 1_000 });
    }, 60_000);
  }
});

describe('a key function that cannot give a key', () => {
  it('discards that step alone with a LimitKeyError entry; the others run', async () => {
    const Keyed = newAction('key_bad', async () => 'ran', {
      concurrency: {
        limit: 1,
        key: (i: { k?: unknown; throws?: boolean }) => {
          if (i.throws) throw new Error('no key for you');
          return i.k as string;
        },
      },
    });
    const Wf = newWorkflow('key_bad', { nodes: { only: { action: Keyed } } });
    await startWorker({ client, workflows: [Wf], concurrency: 4 });
    const bad = [
      await client.submit(Wf, { throws: true }),
      await client.submit(Wf, { k: 42 }),
      await client.submit(Wf, { k: '' }),
      await client.submit(Wf, { k: 'x'.repeat(2000) }),
    ];
    const good = [
      await client.submit(Wf, { k: 'a' }),
      await client.submit(Wf, { k: 'b' }),
      await client.submit(Wf, {}),
    ];
    for (const { runId } of good) {
      expect((await client.waitForRun(runId, { timeoutMs: 30_000 })).state).toBe('completed');
    }
    const messages: string[] = [];
    for (const { runId } of bad) {
      const run = await client.waitForRun(runId, { timeoutMs: 30_000 });
      expect(run.state).toBe('failed');
      const step = run.steps[0];
      expect(step?.state).toBe('discarded');
      expect(step?.attempt).toBe(0);
      expect(step?.errors).toHaveLength(1);
      expect(step?.errors[0]?.kind).toBe('limit_key_invalid');
      messages.push(step?.errors[0]?.message ?? '');
    }
    expect(messages[0]).toMatch(/concurrency key function threw: no key for you/);
    expect(messages[1]).toMatch(/non-empty string.*got number 42/);
    expect(messages[2]).toMatch(/got an empty string/);
    expect(messages[3]).toMatch(/over 1024 bytes/);
    const a = await client.getRun(good[0]?.runId as string);
    expect(a.steps[0]?.concurrencyKey).toBe('a');
    expect((await client.getRun(good[2]?.runId as string)).steps[0]?.concurrencyKey).toBeNull();
  }, 60_000);
});

describe('limits with retries, snoozes, completionTx, cancel and operator retry', () => {
  it('never more than the limit at once, and a DAG of limited nodes completes', async () => {
    let inFlight = 0;
    let max = 0;
    const seen = new Map<string, number>();
    const healed = new Set<string>();
    let hungCounted = false;
    const Work = newAction(
      'combo_work',
      async (ctx, i: { hang?: boolean; refuse?: boolean; healed?: boolean }) => {
        inFlight++;
        max = Math.max(max, inFlight);
        if (i.hang) {
          // Counted until the test cancels its run: from then on it holds no lease, so no slot,
          // even while it has not yet seen ctx.signal.
          hungCounted = true;
          await new Promise<void>((resolve) =>
            ctx.signal.addEventListener('abort', () => resolve(), { once: true }),
          );
          return null;
        }
        try {
          if (i.refuse && !healed.has(ctx.runId)) throw new NonRetryableError('refused');
          const k = `${ctx.runId}/${ctx.node}`;
          const n = (seen.get(k) ?? 0) + 1;
          seen.set(k, n);
          if (n === 1) throw new Error('first attempt fails');
          if (n === 2) throw new SnoozeError(50);
          const tx = await ctx.completionTx();
          await tx.query('INSERT INTO effects (run_id, node, attempt) VALUES ($1, $2, $3)', [
            ctx.runId,
            ctx.node,
            ctx.attempt,
          ]);
          await new Promise((r) => setTimeout(r, 10));
          return { n };
        } finally {
          inFlight--;
        }
      },
      { concurrency: { limit: 2 }, backoff: () => 20 },
    );
    const Dag = newWorkflow('combo_dag', {
      nodes: {
        a: { action: Work },
        b: { action: Work, after: ['a'] },
        c: { action: Work, after: ['a'] },
        d: { action: Work, after: ['b', 'c'] },
      },
    });
    await startWorker({ client, workflows: [Dag], concurrency: 10 });
    // A run whose root hangs until cancelled holds one of the 2 slots.
    const hung = await client.submit(Dag, { hang: true });
    await waitFor('the hung step to run', async () => {
      return (await client.getRun(hung.runId)).steps[0]?.state === 'running';
    });
    const { runIds } = await client.submitMany(
      Dag,
      Array.from({ length: 4 }, () => ({})),
    );
    for (const id of runIds) {
      const run = await client.waitForRun(id, { timeoutMs: 60_000 });
      expect(run.state).toBe('completed');
      for (const s of run.steps) {
        // One failure (a retry), one snooze, then the attempt that completed.
        expect(s.errors.map((e) => e.kind)).toEqual(['error']);
        expect(s.snoozes).toBe(1);
      }
    }
    expect(max).toBeLessThanOrEqual(2);
    const { rows } = await client.pool.query(
      'SELECT count(*)::int AS n FROM effects WHERE run_id = ANY($1::uuid[])',
      [runIds],
    );
    expect(rows[0].n).toBe(16);
    // Cancel frees the slot the hung step held: both slots serve the next runs.
    if (hungCounted) inFlight--;
    hungCounted = false;
    await client.cancel(hung.runId);
    const after = await client.submitMany(
      Dag,
      Array.from({ length: 2 }, () => ({})),
    );
    for (const id of after.runIds) {
      expect((await client.waitForRun(id, { timeoutMs: 60_000 })).state).toBe('completed');
    }
    expect(max).toBeLessThanOrEqual(2);
    // An operator retry of a discarded limited step runs it again under the limit.
    const refused = await client.submit(Dag, { refuse: true });
    const failed = await client.waitForRun(refused.runId, { timeoutMs: 30_000 });
    expect(failed.state).toBe('failed');
    healed.add(refused.runId);
    await client.retry(refused.runId, 'a');
    expect((await client.waitForRun(refused.runId, { timeoutMs: 60_000 })).state).toBe('completed');
    expect(max).toBeLessThanOrEqual(2);
    const limits = await client.listLimits({ workflows: [Dag] });
    expect(limits).toEqual([
      {
        action: 'combo_work',
        kind: 'concurrency',
        key: null,
        keyed: false,
        limit: 2,
        periodMs: null,
        held: 0,
        waiting: 0,
      },
    ]);
  }, 120_000);
});

describe('bad limits and priorities', () => {
  const noop = async () => null;
  it('refuses a limit or period that is not a positive integer, at definition', () => {
    const bad: unknown[] = [
      { concurrency: { limit: 0 } },
      { concurrency: { limit: 1.5 } },
      { concurrency: { limit: -1 } },
      { concurrency: { limit: '3' } },
      { concurrency: { limit: 2 ** 31 } },
      { concurrency: { limit: 1, key: 'k' } },
      { concurrency: { limit: 1, perKey: true } },
      { concurrency: [{ limit: 1 }, { limit: 2 }] },
      {
        concurrency: [
          { limit: 1, key: () => 'a' },
          { limit: 2, key: () => 'b' },
        ],
      },
      { concurrency: null },
      { rateLimit: { limit: 1 } },
      { rateLimit: { limit: 1, periodMs: 0 } },
      { rateLimit: { limit: 1, periodMs: 1.5 } },
      { rateLimit: { limit: 0, periodMs: 1000 } },
      {
        rateLimit: [
          { limit: 1, periodMs: 10 },
          { limit: 2, periodMs: 20 },
        ],
      },
    ];
    for (const options of bad) {
      expect(() => newAction('bad_limit', noop, options as never), JSON.stringify(options)).toThrow(
        WorkflowDefinitionError,
      );
    }
    const ok = newAction('ok_limit', noop, {
      concurrency: [{ limit: 10 }, { limit: 1, key: () => 'a' }],
      rateLimit: [
        { limit: 5, periodMs: 1000 },
        { limit: 1, periodMs: 1000, key: () => 'b' },
      ],
    });
    expect(ok.limits?.concurrency).toBe(10);
    expect(ok.limits?.keyedRate?.periodMs).toBe(1000);
  });

  it("a bad option's message names the action, and shows a string as a string", async () => {
    const thrown = (fn: () => unknown): Error => {
      try {
        fn();
      } catch (err) {
        return err as Error;
      }
      throw new Error('nothing was thrown');
    };
    const limit = thrown(() => newAction('msg_limit', noop, { concurrency: { limit: 0 } }));
    expect(limit).toBeInstanceOf(WorkflowDefinitionError);
    expect(limit.message).toMatch(/^action 'msg_limit': concurrency\.limit must be an integer/);
    expect((limit as WorkflowDefinitionError).kind).toBe('action');
    const attempts = thrown(() => newAction('msg_attempts', noop, { maxAttempts: 0 }));
    expect(attempts.message).toMatch(/^action 'msg_attempts': maxAttempts/);
    // A workflow's own errors still name the workflow.
    const empty = thrown(() => newWorkflow('msg_empty', { nodes: {} }));
    expect(empty.message).toMatch(/^workflow 'msg_empty': /);

    const Wf = newWorkflow('msg_prio', {
      nodes: { only: { action: newAction('msg_prio', noop) } },
    });
    await expect(client.submit(Wf, {}, { priority: '3' } as never)).rejects.toThrow(
      "priority must be an integer from -1000 to 1000, got '3' (a string)",
    );
    await expect(client.submit(Wf, {}, { priority: 3.5 })).rejects.toThrow(/, got 3\.5$/);
    await expect(client.submit(Wf, {}, { delayMs: '5' } as never)).rejects.toThrow(
      "got '5' (a string)",
    );
  });

  it('refuses a priority outside -1000..1000 or not an integer, in every submit form; nothing is written', async () => {
    const Wf = newWorkflow('prio_bad', {
      nodes: { only: { action: newAction('prio_bad', noop) } },
    });
    const before = await runsCount();
    for (const priority of [1001, -1001, 1.5, Number.NaN, '1', null]) {
      const options = { priority } as never;
      await expect(client.submit(Wf, {}, options)).rejects.toThrow(InputValidationError);
      await expect(client.submitOnce(Wf, 'k', {}, options)).rejects.toThrow(InputValidationError);
      await expect(client.submitMany(Wf, [{}], options)).rejects.toThrow(InputValidationError);
      await expect(
        client.submit(Wf, {}, { ...(options as object), debounce: { key: 'd', delayMs: 10 } }),
      ).rejects.toThrow(InputValidationError);
    }
    expect(await runsCount()).toBe(before);
    // The bounds themselves are fine.
    await client.submit(Wf, {}, { priority: 1000 });
    await client.submit(Wf, {}, { priority: -1000 });
    expect(await runsCount()).toBe(before + 2);
  });
});

describe('cyclone limits', () => {
  it('lists an idle action whose only limits have a key: a row per limit, with no key in use', async () => {
    const byK = (i: { k: string }) => i.k;
    const Idle = newAction('cli_idle_keyed', async () => null, {
      concurrency: { limit: 2, key: byK },
      rateLimit: { limit: 3, periodMs: 500, key: byK },
    });
    const Wf = newWorkflow('cli_idle_keyed', { nodes: { only: { action: Idle } } });
    const w = await startWorker({ client, workflows: [Wf] });
    const base = { action: 'cli_idle_keyed', key: null, keyed: true, held: 0, waiting: 0 };
    const expected = [
      { ...base, kind: 'concurrency', limit: 2, periodMs: null },
      { ...base, kind: 'rate', limit: 3, periodMs: 500 },
    ];
    // As recorded by the worker when its claim loop starts (the CLI's source), and from the
    // definitions. Before, an idle limit with a key had no row: the action was not listed.
    const recorded = await waitFor('the worker to record its limits', async () => {
      const l = (await client.listLimits()).filter((x) => x.action === 'cli_idle_keyed');
      return l.length > 0 ? l : undefined;
    });
    expect(recorded).toEqual(expected);
    expect(await client.listLimits({ workflows: [Wf] })).toEqual(expected);
    let stdout = '';
    await main(['--database-url', db.url, 'limits'], {
      stdout: { write: (s: string) => (stdout += s) },
      stderr: { write: () => true },
      env: {},
    });
    expect(stdout).toMatch(/cli_idle_keyed\s+concurrency 2\s+\(no key in use\)\s+0\s+0/);
    expect(stdout).toMatch(/cli_idle_keyed\s+rate 3\/500ms\s+\(no key in use\)\s+0\s+0/);
    await w.stop({ graceMs: 1_000 });
  }, 60_000);

  it('lists the limits the workers recorded, per key, as a table and as JSON', async () => {
    const gate = deferred();
    const Keyed = newAction(
      'cli_keyed',
      async () => {
        await gate.promise;
      },
      { concurrency: [{ limit: 5 }, { limit: 1, key: (i: { k: string }) => i.k }] },
    );
    const Wf = newWorkflow('cli_keyed', { nodes: { only: { action: Keyed } } });
    const w = await startWorker({ client, workflows: [Wf], concurrency: 4 });
    await client.submitMany(Wf, [{ k: 'a' }, { k: 'a' }, { k: 'b' }]);
    await waitFor('both keys to run', async () => {
      const l = await client.listLimits();
      return l.filter((x) => x.action === 'cli_keyed' && x.held === 1 && x.key !== null).length ===
        2
        ? l
        : undefined;
    });
    let stdout = '';
    const code = await main(['--database-url', db.url, 'limits', '--json'], {
      stdout: { write: (s: string) => (stdout += s) },
      stderr: { write: () => true },
      env: {},
    });
    expect(code).toBe(0);
    const rows = (JSON.parse(stdout) as { action: string }[]).filter(
      (r) => r.action === 'cli_keyed',
    );
    expect(rows).toEqual([
      {
        action: 'cli_keyed',
        kind: 'concurrency',
        key: null,
        keyed: false,
        limit: 5,
        periodMs: null,
        held: 2,
        waiting: 1,
      },
      {
        action: 'cli_keyed',
        kind: 'concurrency',
        key: 'a',
        keyed: true,
        limit: 1,
        periodMs: null,
        held: 1,
        waiting: 1,
      },
      {
        action: 'cli_keyed',
        kind: 'concurrency',
        key: 'b',
        keyed: true,
        limit: 1,
        periodMs: null,
        held: 1,
        waiting: 0,
      },
    ]);
    stdout = '';
    await main(['--database-url', db.url, 'limits'], {
      stdout: { write: (s: string) => (stdout += s) },
      stderr: { write: () => true },
      env: {},
    });
    expect(stdout).toMatch(/ACTION\s+LIMIT\s+KEY\s+HELD\s+WAITING/);
    expect(stdout).toMatch(/cli_keyed\s+concurrency 1\s+a\s+1\s+1/);
    gate.resolve();
    await w.stop({ graceMs: 1_000 });
  }, 60_000);
});
