/**
 * DAG semantics: fan-out and fan-in on a real database (a join runs only after all of its
 * upstreams, and sees their outputs), and definition errors thrown at definition time.
 */
import { deferred, waitFor } from '@cyclone/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  type Action,
  Client,
  type Context,
  newAction,
  newWorkflow,
  Worker,
  WorkflowDefinitionError,
} from '../src/index.js';
import { createTestDb, type TestDb } from './support/db.js';

const noop = newAction('noop', async () => ({ ok: true }));

/** Calls `fn` and returns the WorkflowDefinitionError it throws (fails the test otherwise). */
function definitionError(fn: () => unknown): WorkflowDefinitionError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(WorkflowDefinitionError);
    const e = err as WorkflowDefinitionError;
    expect(e.code).toBe('WORKFLOW_DEFINITION');
    return e;
  }
  throw new Error('expected a WorkflowDefinitionError, nothing was thrown');
}

describe('definition errors (thrown by newWorkflow, before anything touches the database)', () => {
  it('a two-node cycle names both nodes', () => {
    const e = definitionError(() =>
      newWorkflow('cyc2', {
        nodes: { a: { action: noop, after: ['b'] }, b: { action: noop, after: ['a'] } },
      }),
    );
    expect(e.message).toMatch(/cycle/i);
    expect(e.message).toMatch(/\ba\b/);
    expect(e.message).toMatch(/\bb\b/);
    expect(e.workflow).toBe('cyc2');
  });

  it('a cycle behind a valid root names the nodes of the cycle only', () => {
    const e = definitionError(() =>
      newWorkflow('cyc3', {
        nodes: {
          root: { action: noop },
          x: { action: noop, after: ['root', 'z'] },
          y: { action: noop, after: ['x'] },
          z: { action: noop, after: ['y'] },
        },
      }),
    );
    expect(e.message).toMatch(/cycle/i);
    for (const n of ['x', 'y', 'z']) expect(e.message).toMatch(new RegExp(`\\b${n}\\b`));
    expect(e.message.replace(/workflow 'cyc3'/, '')).not.toMatch(/\broot\b/);
  });

  it('a dependency on an unknown node', () => {
    const e = definitionError(() =>
      newWorkflow('unknown_dep', {
        nodes: { a: { action: noop }, b: { action: noop, after: ['nope'] } },
      }),
    );
    expect(e.message).toMatch(/unknown/i);
    expect(e.message).toContain('nope');
  });

  it('a dependency named like an Object.prototype member is still an unknown node', () => {
    for (const dep of ['toString', 'constructor', 'hasOwnProperty']) {
      const e = definitionError(() =>
        newWorkflow('proto_dep', {
          nodes: { a: { action: noop }, b: { action: noop, after: [dep] } },
        }),
      );
      expect(e.message).toMatch(/unknown/i);
      expect(e.message).toContain(dep);
    }
  });

  it('a node listed twice in after (a duplicate dependency)', () => {
    const e = definitionError(() =>
      newWorkflow('dup_dep', {
        nodes: { a: { action: noop }, b: { action: noop, after: ['a', 'a'] } },
      }),
    );
    expect(e.message).toMatch(/twice|duplicate/i);
    expect(e.message).toContain("'a'");
  });

  it('a node that depends on itself', () => {
    const e = definitionError(() =>
      newWorkflow('self_dep', { nodes: { a: { action: noop, after: ['a'] } } }),
    );
    expect(e.message).toMatch(/itself|self|cycle/i);
  });

  it('an empty workflow', () => {
    const e = definitionError(() => newWorkflow('empty', { nodes: {} }));
    expect(e.message).toMatch(/at least one node|empty/i);
  });

  it('node names that are not plain identifiers', () => {
    for (const bad of [
      '',
      'has space',
      '1abc',
      'a.b',
      'a/b',
      "a'b",
      'é',
      'x'.repeat(64),
      'a\u0000',
    ]) {
      const e = definitionError(() =>
        newWorkflow('bad_node', { nodes: { [bad]: { action: noop } } }),
      );
      expect(e.message).toMatch(/identifier/i);
    }
    // The boundary cases that are fine: 63 characters, underscores, dashes, digits after the first.
    expect(() =>
      newWorkflow('good_nodes', {
        nodes: {
          ['x'.repeat(63)]: { action: noop },
          _a: { action: noop },
          'b-2': { action: noop },
        },
      }),
    ).not.toThrow();
  });

  it('workflow and action names that are not plain identifiers', () => {
    definitionError(() => newWorkflow('bad name', { nodes: { a: { action: noop } } }));
    definitionError(() => newAction('bad name', async () => null));
  });

  it('a node whose action was not made by newAction', () => {
    definitionError(() =>
      newWorkflow('no_action', {
        nodes: { a: { action: { name: 'x' } as unknown as Action } },
      }),
    );
  });

  it('bad numeric options of actions and nodes', () => {
    definitionError(() => newAction('a0', async () => null, { maxAttempts: 0 }));
    definitionError(() => newAction('a1', async () => null, { maxAttempts: 1.5 }));
    definitionError(() => newAction('a2', async () => null, { timeout: -1 }));
    definitionError(() => newWorkflow('wma', { nodes: { a: { action: noop, maxAttempts: 0 } } }));
  });

  it('an out-of-range node or action option names the node, the option and its range', () => {
    // These reached the database before: 2^31 attempts failed the submit with PostgreSQL's
    // "out of range for type integer", and a timeoutMs on an action node was ignored.
    const node = (spec: Record<string, unknown>) =>
      definitionError(() => newWorkflow('wr', { nodes: { a: { action: noop, ...spec } } })).message;
    expect(node({ delayMs: -5 })).toBe(
      "workflow 'wr': node 'a': delayMs must be a number of ms from 0 to 316224000000 (10 years), got -5",
    );
    expect(node({ maxAttempts: 2 ** 31 })).toBe(
      "workflow 'wr': node 'a': maxAttempts must be an integer from 1 to 1000000, got 2147483648",
    );
    expect(node({ maxAttempts: 0 })).toMatch(
      /node 'a': maxAttempts must be an integer from 1 to 1000000, got 0$/,
    );
    expect(node({ timeoutMs: -1 })).toBe(
      "workflow 'wr': node 'a': timeoutMs is a wait node's option (with waitFor); an action's time limit is newAction's timeout",
    );
    expect(
      definitionError(() => newAction('ar', async () => null, { maxAttempts: 1_000_001 })).message,
    ).toBe("action 'ar': maxAttempts must be an integer from 1 to 1000000, got 1000001");
    // The bounds themselves are fine.
    expect(
      newWorkflow('wok', { nodes: { a: { action: noop, maxAttempts: 1_000_000, delayMs: 0 } } })
        .nodes[0]?.maxAttempts,
    ).toBe(1_000_000);
  });

  it('a valid DAG is ordered topologically and knows ancestors', () => {
    const wf = newWorkflow('topo', {
      nodes: {
        join: { action: noop, after: ['b', 'c'] },
        c: { action: noop, after: ['a'] },
        b: { action: noop, after: ['a'] },
        a: { action: noop },
      },
    });
    const order = wf.nodes.map((n) => n.name);
    expect(order.indexOf('a')).toBeLessThan(order.indexOf('b'));
    expect(order.indexOf('a')).toBeLessThan(order.indexOf('c'));
    expect(order.indexOf('b')).toBeLessThan(order.indexOf('join'));
    expect(order.indexOf('c')).toBeLessThan(order.indexOf('join'));
    expect(wf.nodeByName.get('join')?.ancestors).toEqual(['a', 'b', 'c']);
  });
});

describe('fan-out and fan-in on a real database', () => {
  let db: TestDb;
  let client: Client;
  let worker: Worker | undefined;

  beforeAll(async () => {
    db = await createTestDb();
    client = new Client({ connectionString: db.url, poolSize: 4 });
    await db.pool.query(
      `CREATE TABLE events (seq bigserial PRIMARY KEY, run_id uuid NOT NULL, node text NOT NULL)`,
    );
  });

  afterAll(async () => {
    await worker?.stop({ graceMs: 1_000 });
    await client?.close();
    await db?.drop();
  });

  it('a join runs once, only after all of its upstreams, and sees their outputs', async () => {
    const log: string[] = [];
    const gateC = deferred();
    const seen: {
      input?: unknown;
      viaCtx?: Record<string, unknown>;
      notUpstreamThrew?: boolean;
      ctx?: Record<string, unknown>;
    } = {};

    const record = async (ctx: Context) => {
      const tx = await ctx.completionTx();
      await tx.query('INSERT INTO events (run_id, node) VALUES ($1, $2)', [ctx.runId, ctx.node]);
    };

    const start = newAction('start', async (ctx, input: { base: number }) => {
      log.push(`start:${ctx.node}`);
      await record(ctx);
      log.push(`end:${ctx.node}`);
      return { base: input.base };
    });
    const branch = newAction('branch', async (ctx, input: { base: number; k: number }) => {
      log.push(`start:${ctx.node}`);
      if (ctx.node === 'c') await gateC.promise;
      await record(ctx);
      log.push(`end:${ctx.node}`);
      return { v: input.base * input.k, from: ctx.node };
    });
    const joinAction = newAction(
      'join',
      async (ctx, input: { sum: number; base: number }) => {
        log.push(`start:${ctx.node}`);
        seen.input = input;
        seen.ctx = {
          runId: ctx.runId,
          node: ctx.node,
          attempt: ctx.attempt,
          workflow: ctx.workflow,
          action: ctx.action,
        };
        seen.viaCtx = {
          a: ctx.upstream('a'),
          b: ctx.upstream('b'),
          c: ctx.upstream('c'),
          d: ctx.upstream('d'),
        };
        try {
          ctx.upstream('side');
          seen.notUpstreamThrew = false;
        } catch {
          seen.notUpstreamThrew = true;
        }
        await record(ctx);
        log.push(`end:${ctx.node}`);
        return { total: input.sum + input.base };
      },
      { input: z.object({ sum: z.number(), base: z.number() }) },
    );

    type Up = { v: number };
    const wf = newWorkflow('fan', {
      input: z.object({ base: z.number() }),
      nodes: {
        a: { action: start },
        side: { action: start },
        b: { action: branch, after: ['a'], input: (run) => ({ base: run.base, k: 2 }) },
        c: { action: branch, after: ['a'], input: (run) => ({ base: run.base, k: 3 }) },
        d: { action: branch, after: ['a'], input: (run) => ({ base: run.base, k: 4 }) },
        join: {
          action: joinAction,
          after: ['b', 'c', 'd'],
          input: (_run, up) => ({
            sum: (up.b as Up).v + (up.c as Up).v + (up.d as Up).v,
            base: (up.a as { base: number }).base,
          }),
        },
      },
    });

    worker = new Worker({ client, workflows: [wf], concurrency: 4, pollIntervalMs: 100 });
    await worker.start();
    const { runId } = await client.submit(wf, { base: 10 });

    // b and d complete while c is held: the join must stay pending with one dependency left.
    await waitFor('b and d completed', async () => {
      const run = await client.getRun(runId);
      const st = (n: string) => run.steps.find((s) => s.node === n)?.state;
      return st('b') === 'completed' && st('d') === 'completed' && st('c') === 'running';
    });
    const before = await client.getRun(runId);
    const join = before.steps.find((s) => s.node === 'join');
    expect(join?.state).toBe('pending');
    expect(join?.depsRemaining).toBe(1);
    expect(join?.attempt).toBe(0);
    expect(log).not.toContain('start:join');
    expect(before.state).toBe('running');

    gateC.resolve();
    const run = await client.waitForRun(runId, { timeoutMs: 20_000 });
    expect(run.state).toBe('completed');
    expect(run.completedAt).toBeInstanceOf(Date);
    for (const s of run.steps) {
      expect(s.state).toBe('completed');
      expect(s.attempt).toBe(1);
    }

    // Order in JS: the join started after every upstream handler ended.
    const joinStart = log.indexOf('start:join');
    expect(joinStart).toBeGreaterThan(-1);
    for (const n of ['a', 'b', 'c', 'd']) {
      expect(log.indexOf(`end:${n}`)).toBeGreaterThan(-1);
      expect(log.indexOf(`end:${n}`)).toBeLessThan(joinStart);
    }
    expect(log.filter((e) => e === 'start:join')).toHaveLength(1);

    // Order in the database: each node's row once; the join's row after all of its upstreams'.
    const { rows } = await db.pool.query<{ node: string; seq: string }>(
      'SELECT node, seq FROM events WHERE run_id = $1 ORDER BY seq',
      [runId],
    );
    expect(rows.map((r) => r.node).sort()).toEqual(['a', 'b', 'c', 'd', 'join', 'side']);
    const seq = (n: string) => Number(rows.find((r) => r.node === n)?.seq);
    for (const n of ['b', 'c', 'd']) {
      expect(seq(n)).toBeGreaterThan(seq('a'));
      expect(seq('join')).toBeGreaterThan(seq(n));
    }

    // And by the step timestamps: the join started after every upstream completed.
    const stepOf = (n: string) => run.steps.find((s) => s.node === n);
    const joinStarted = stepOf('join')?.startedAt?.getTime() ?? 0;
    for (const n of ['b', 'c', 'd']) {
      expect(joinStarted).toBeGreaterThanOrEqual(stepOf(n)?.completedAt?.getTime() ?? Infinity);
    }

    // Upstream outputs reached the join through the input mapper and through ctx.upstream.
    expect(seen.input).toEqual({ sum: 10 * 2 + 10 * 3 + 10 * 4, base: 10 });
    expect(seen.viaCtx).toEqual({
      a: { base: 10 },
      b: { v: 20, from: 'b' },
      c: { v: 30, from: 'c' },
      d: { v: 40, from: 'd' },
    });
    expect(seen.notUpstreamThrew).toBe(true);
    expect(seen.ctx).toEqual({ runId, node: 'join', attempt: 1, workflow: 'fan', action: 'join' });
    expect(stepOf('join')?.output).toEqual({ total: 100 });
    expect(stepOf('c')?.output).toEqual({ v: 30, from: 'c' });
  });
});
