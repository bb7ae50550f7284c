/**
 * Bad-input catalogue, workflow definitions (property-based, fast-check): generated DAGs of up
 * to 8 nodes with odd but valid names are accepted, ordered topologically with the right
 * ancestors, and run on a real worker with every node once and after its upstream nodes; the
 * same DAGs with one defect — a cycle, a self or unknown or duplicate dependency, a node or
 * workflow name that is not a plain identifier, an `after` that is not an array, an action not
 * made by `newAction`, no node at all — throw `WorkflowDefinitionError`, and nothing in the
 * database changes.
 */
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  Client,
  type NodeSpec,
  newAction,
  newWorkflow,
  Worker,
  type Workflow,
  WorkflowDefinitionError,
} from '../src/index.js';
import { createTestDb, type TestDb } from './support/db.js';
import { fingerprint } from './support/fingerprint.js';

/** Fixed seed: the catalogue is the same on every run (override with FC_SEED to explore). */
const SEED = Number(process.env.FC_SEED ?? 20261130);

const NAME = /^[A-Za-z_][A-Za-z0-9_-]{0,62}$/;

/** Valid names, with the odd ones that trip naive code: prototype members, SQL words, 63 chars. */
const oddValidName = fc.constantFrom(
  '__proto__',
  'constructor',
  'toString',
  'hasOwnProperty',
  'valueOf',
  '_',
  'a-b',
  'select',
  'DROP',
  'null',
  'undefined',
  'x'.repeat(63),
);
const validName = fc.oneof(
  { weight: 3, arbitrary: fc.stringMatching(NAME) },
  { weight: 1, arbitrary: oddValidName },
);

/** Names that are not plain identifiers: SQL, quotes, NUL, Unicode, spaces, 64 chars, empty. */
const invalidName = fc.oneof(
  fc.constantFrom(
    '',
    ' ',
    'a b',
    '1abc',
    '-a',
    'a'.repeat(64),
    "x'; DROP TABLE cyclone.cyclone_runs; --",
    'a\u0000b',
    'héllo',
    '注文',
    '😀',
    'a.b',
    'a/b',
    '$1',
    'a"b',
    'line\nbreak',
    'tab\t',
    '\uD800',
  ),
  fc.string({ unit: 'binary', maxLength: 80 }).filter((s) => !NAME.test(s)),
);

/** A DAG: unique names, and for node j a subset of the nodes before it as `after`. */
interface Dag {
  names: string[];
  after: string[][];
}

const dag: fc.Arbitrary<Dag> = fc
  .uniqueArray(validName, { minLength: 1, maxLength: 8 })
  .chain((names) =>
    fc
      .tuple(...names.map((_, j) => fc.array(fc.boolean(), { minLength: j, maxLength: j })))
      .map((picks) => ({
        names,
        after: picks.map((bits) => names.filter((_, i) => bits[i])),
      })),
  );

const noop = newAction('catalogue_noop', async () => null);

/** The spec of a DAG, built with own properties (a node named `__proto__` stays a node). */
function specOf(
  d: Dag,
  action: NodeSpec<unknown>['action'] = noop,
): Record<string, NodeSpec<unknown>> {
  return Object.fromEntries(d.names.map((n, j) => [n, { action, after: [...(d.after[j] ?? [])] }]));
}

/** Every ancestor of each node, by brute force. */
function ancestorsOf(d: Dag): Map<string, Set<string>> {
  const out = new Map<string, Set<string>>();
  d.names.forEach((n, j) => {
    const set = new Set<string>();
    for (const dep of d.after[j] ?? []) {
      set.add(dep);
      for (const a of out.get(dep) ?? []) set.add(a);
    }
    out.set(n, set);
  });
  return out;
}

type Defect =
  | { kind: 'cycle' }
  | { kind: 'self'; at: number }
  | { kind: 'unknown'; at: number; name: string }
  | { kind: 'duplicate'; at: number }
  | { kind: 'badNodeName'; at: number; name: string }
  | { kind: 'badWorkflowName'; name: string }
  | { kind: 'afterNotArray'; at: number }
  | { kind: 'notAnAction'; at: number; value: unknown }
  | { kind: 'empty' };

const defect: fc.Arbitrary<Defect> = fc.oneof(
  fc.constant({ kind: 'cycle' as const }),
  fc.record({ kind: fc.constant('self' as const), at: fc.nat() }),
  fc.record({
    kind: fc.constant('unknown' as const),
    at: fc.nat(),
    name: fc.oneof(validName, invalidName),
  }),
  fc.record({ kind: fc.constant('duplicate' as const), at: fc.nat() }),
  fc.record({ kind: fc.constant('badNodeName' as const), at: fc.nat(), name: invalidName }),
  fc.record({ kind: fc.constant('badWorkflowName' as const), name: invalidName }),
  fc.record({ kind: fc.constant('afterNotArray' as const), at: fc.nat() }),
  fc.record({
    kind: fc.constant('notAnAction' as const),
    at: fc.nat(),
    value: fc.constantFrom(undefined, null, {}, { kind: 'workflow' }, () => null, 'noop', 42),
  }),
  fc.constant({ kind: 'empty' as const }),
);

/** Applies `x` to the DAG: the workflow name and the spec's nodes that must be refused. */
function broken(d: Dag, x: Defect): { name: string; nodes: Record<string, unknown> } {
  const nodes = specOf(d) as Record<string, { action: unknown; after: unknown }>;
  const node = (at: number) =>
    nodes[d.names[at % d.names.length] as string] as { action: unknown; after: string[] };
  const nameAt = (at: number) => d.names[at % d.names.length] as string;
  switch (x.kind) {
    case 'cycle': {
      // A node with an ancestor gets that ancestor to depend on it; without edges, two nodes (or
      // one) depend on each other.
      const anc = ancestorsOf(d);
      const j = d.names.findIndex((n) => (anc.get(n)?.size ?? 0) > 0);
      if (j >= 0) {
        const a = [...(anc.get(nameAt(j)) ?? [])][0] as string;
        (nodes[a] as { after: string[] }).after.push(nameAt(j));
      } else if (d.names.length >= 2) {
        node(0).after.push(nameAt(1));
        node(1).after.push(nameAt(0));
      } else node(0).after.push(nameAt(0));
      return { name: 'wf', nodes };
    }
    case 'self':
      node(x.at).after.push(nameAt(x.at));
      return { name: 'wf', nodes };
    case 'unknown': {
      const name = d.names.includes(x.name) ? `${x.name}_missing` : x.name;
      node(x.at).after.push(name);
      return { name: 'wf', nodes };
    }
    case 'duplicate': {
      const j = d.after.findIndex((a) => a.length > 0);
      if (j >= 0) node(j).after.push((d.after[j] as string[])[0] as string);
      else node(x.at).after.push(nameAt(x.at)); // no edge to duplicate: a self-dependency
      return { name: 'wf', nodes };
    }
    case 'badNodeName': {
      const old = nameAt(x.at);
      const renamed = Object.fromEntries(
        Object.entries(nodes).map(([k, v]) => [
          k === old ? x.name : k,
          { ...v, after: (v.after as string[]).map((a) => (a === old ? x.name : a)) },
        ]),
      );
      return { name: 'wf', nodes: renamed };
    }
    case 'badWorkflowName':
      return { name: x.name, nodes };
    case 'afterNotArray':
      node(x.at).after = nameAt(x.at) as never;
      return { name: 'wf', nodes };
    case 'notAnAction':
      node(x.at).action = x.value;
      return { name: 'wf', nodes };
    case 'empty':
      return { name: 'wf', nodes: {} };
  }
}

describe('generated workflow definitions', () => {
  it('every generated DAG is accepted: topological order, ancestors and downstream are right', () => {
    fc.assert(
      fc.property(dag, (d) => {
        const wf = newWorkflow('generated', { nodes: specOf(d) });
        const order = wf.nodes.map((n) => n.name);
        expect([...order].sort()).toEqual([...d.names].sort());
        const anc = ancestorsOf(d);
        for (const n of wf.nodes) {
          for (const dep of n.after) expect(order.indexOf(dep)).toBeLessThan(order.indexOf(n.name));
          expect([...n.ancestors]).toEqual([...(anc.get(n.name) ?? [])].sort());
          for (const child of n.downstream) {
            expect(wf.nodeByName.get(child)?.after).toContain(n.name);
          }
        }
      }),
      { seed: SEED, numRuns: 300 },
    );
  });

  it('every DAG with one defect throws WorkflowDefinitionError, saying what is wrong', () => {
    fc.assert(
      fc.property(dag, defect, (d, x) => {
        const { name, nodes } = broken(d, x);
        let thrown: unknown;
        try {
          newWorkflow(name, { nodes: nodes as Record<string, NodeSpec<unknown>> });
        } catch (err) {
          thrown = err;
        }
        expect(thrown).toBeInstanceOf(WorkflowDefinitionError);
        expect((thrown as WorkflowDefinitionError).code).toBe('WORKFLOW_DEFINITION');
        const msg = (thrown as Error).message;
        if (x.kind === 'cycle') expect(msg).toMatch(/cycle|depends on itself/);
        if (x.kind === 'unknown') expect(msg).toMatch(/unknown node|not a plain identifier/);
        if (x.kind === 'badNodeName' || x.kind === 'badWorkflowName') {
          expect(msg).toMatch(/is not a plain identifier/);
        }
        if (x.kind === 'empty') expect(msg).toMatch(/at least one node/);
      }),
      { seed: SEED, numRuns: 400 },
    );
  });

  it('action names and options are checked too', () => {
    fc.assert(
      fc.property(invalidName, (name) => {
        expect(() => newAction(name, async () => null)).toThrow(WorkflowDefinitionError);
      }),
      { seed: SEED, numRuns: 100 },
    );
    for (const bad of [0, -1, 1.5, Number.NaN, Number.POSITIVE_INFINITY, 2 ** 31]) {
      expect(() => newAction('a', async () => null, { timeout: bad })).toThrow(
        WorkflowDefinitionError,
      );
    }
    for (const bad of [0, -1, 1.5, Number.NaN]) {
      expect(() => newAction('a', async () => null, { maxAttempts: bad })).toThrow(
        WorkflowDefinitionError,
      );
    }
    expect(() => newAction('a', 'not a function' as never)).toThrow(WorkflowDefinitionError);
  });

  // Regression, found by this catalogue (fixed): `newWorkflow` checks a node's action by its `kind` only, so a
  // look-alike without a handler is accepted and every attempt of the node then fails at run
  // time (TypeError, retried up to maxAttempts) instead of at definition. newWorkflow now checks the handler.
  it('an action look-alike ({ kind: "action" }, no handler) is refused at definition', () => {
    expect(() =>
      newWorkflow('forged', { nodes: { a: { action: { kind: 'action' } as never } } }),
    ).toThrow(WorkflowDefinitionError);
  });
});

describe('generated workflows on a real database', () => {
  let db: TestDb;
  let client: Client;
  let worker: Worker;
  const workflows: { wf: Workflow<unknown>; dag: Dag }[] = [];

  beforeAll(async () => {
    db = await createTestDb();
    await db.pool.query(
      'CREATE TABLE catalogue_ran (run_id uuid NOT NULL, node text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())',
    );
    client = new Client({ connectionString: db.url });
    const record = newAction('catalogue_record', async (ctx) => {
      const tx = await ctx.completionTx();
      await tx.query('INSERT INTO catalogue_ran (run_id, node) VALUES ($1, $2)', [
        ctx.runId,
        ctx.node,
      ]);
      return { node: ctx.node };
    });
    // The same generator, a fixed sample: 12 DAGs plus one of only odd names.
    const dags = fc.sample(dag, { seed: SEED, numRuns: 12 });
    dags.push({
      names: ['__proto__', 'constructor', 'toString', 'select', 'x'.repeat(63)],
      after: [[], ['__proto__'], ['__proto__'], ['constructor', 'toString'], ['select']],
    });
    dags.forEach((d, i) => {
      workflows.push({ wf: newWorkflow(`catalogue_${i}`, { nodes: specOf(d, record) }), dag: d });
    });
    worker = new Worker({
      client,
      workflows: workflows.map((w) => w.wf),
      concurrency: 8,
      pollIntervalMs: 50,
      leaseMs: 5_000,
    });
    await worker.start();
  });

  afterAll(async () => {
    await worker?.stop({ graceMs: 2_000 });
    await client?.close();
    await db?.drop();
  });

  it('each runs to completion: every node once, each after all of its upstream nodes', async () => {
    const runs = await Promise.all(
      workflows.map(async ({ wf, dag: d }) => ({ d, ...(await client.submit(wf, {})) })),
    );
    for (const { runId, d } of runs) {
      const run = await client.waitForRun(runId, { timeoutMs: 20_000, pollMs: 25 });
      expect(run.state).toBe('completed');
      const { rows } = await db.pool.query<{ node: string; at: Date }>(
        'SELECT node, at FROM catalogue_ran WHERE run_id = $1',
        [runId],
      );
      expect(rows.map((r) => r.node).sort()).toEqual([...d.names].sort());
      const at = new Map(rows.map((r) => [r.node, r.at.getTime()]));
      d.names.forEach((n, j) => {
        for (const dep of d.after[j] ?? []) {
          expect(at.get(dep) as number).toBeLessThanOrEqual(at.get(n) as number);
        }
      });
    }
  });

  it('refused definitions leave the database as it was', async () => {
    const before = await fingerprint(db.pool);
    const samples = fc.sample(fc.tuple(dag, defect), { seed: SEED, numRuns: 50 });
    for (const [d, x] of samples) {
      const { name, nodes } = broken(d, x);
      expect(() =>
        newWorkflow(name, { nodes: nodes as Record<string, NodeSpec<unknown>> }),
      ).toThrow(WorkflowDefinitionError);
    }
    expect(await fingerprint(db.pool)).toEqual(before);
  });
});
