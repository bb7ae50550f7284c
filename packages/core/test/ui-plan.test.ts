/**
 * The operator UI's reads stay cheap on a big history: on a database seeded with 1,000,000
 * finished runs (one step each) and a small live set, every statement the reader sends is run
 * through EXPLAIN, and none may read cyclone_runs or cyclone_steps by a sequential scan. Each
 * read is called as the UI calls it (every filter combination of the runs list, both paging
 * directions, lookups, a run, a step, the overview, workflows, health), through the same code
 * as `createUiReader`, with EXPLAIN put in front of each statement it sends.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client } from '../src/index.js';
import { channelOf, quoteSchema } from '../src/schema.js';
import type { Queryable } from '../src/sql/statement.js';
import { uiReads } from '../src/ui-reader.js';
import { createTestDb, type TestDb } from './support/db.js';
import { type SeededHistory, seedHistory } from './support/seed-history.js';

const RUNS = 1_000_000;
const BIG_TABLES = new Set(['cyclone_runs', 'cyclone_steps']);

/** A statement the reader sent and the plan PostgreSQL chose for it. */
interface Explained {
  read: string;
  text: string;
  plan: unknown;
}

let db: TestDb;
let client: Client;
let seeded: SeededHistory;
const explained: Explained[] = [];
let current = '';

beforeAll(async () => {
  db = await createTestDb();
  client = new Client({ connectionString: db.url, poolSize: 2 });
  seeded = await seedHistory(db.pool, { runs: RUNS });
}, 600_000);

afterAll(async () => {
  await client?.close();
  await db?.drop();
});

/** The reader's reads, each statement EXPLAINed (then run, so that the read goes on). */
function explainingReads() {
  const read = async <T>(fn: (c: Queryable) => Promise<T>): Promise<T> => {
    const c = await db.pool.connect();
    try {
      const q: Queryable = {
        query: async (textOrConfig: string | { text: string }, values?: unknown[]) => {
          const text = typeof textOrConfig === 'string' ? textOrConfig : textOrConfig.text;
          const { rows } = await c.query(`EXPLAIN (FORMAT JSON) ${text}`, values);
          explained.push({ read: current, text, plan: rows[0]['QUERY PLAN'] });
          return c.query(text, values);
        },
      };
      return await fn(q);
    } finally {
      c.release();
    }
  };
  return uiReads(
    read,
    { q: quoteSchema('cyclone'), prepare: false, channel: channelOf('cyclone') },
    'cyclone',
    10_000,
  );
}

/** Every node of a JSON plan. */
function* nodes(plan: unknown): Generator<Record<string, unknown>> {
  if (Array.isArray(plan)) {
    for (const p of plan) yield* nodes(p);
    return;
  }
  if (plan && typeof plan === 'object') {
    const o = plan as Record<string, unknown>;
    if ('Node Type' in o) yield o;
    for (const v of Object.values(o)) if (typeof v === 'object') yield* nodes(v);
  }
}

describe('UI reads on 1,000,000 finished runs', () => {
  it('never scan cyclone_runs or cyclone_steps sequentially', async () => {
    const ui = explainingReads();
    const calls: [string, () => Promise<unknown>][] = [
      ['overview', () => ui.overview()],
      ['throughput 1h', () => ui.throughput({ window: '1h' })],
      ['throughput 7d of a workflow', () => ui.throughput({ window: '7d', workflow: 'wf_1' })],
      ['workflows', () => ui.listWorkflows()],
      ['health', () => ui.health()],
      ['workers', () => ui.listWorkers()],
      ['lookup by run id', () => ui.lookup(seeded.finishedRunId)],
      ['lookup by submit key', () => ui.lookup('key-500002')],
      ['lookup by workflow:key', () => ui.lookup('wf_2:key-500002')],
      ['run', () => ui.getRun(seeded.finishedRunId)],
      ['run input', () => ui.runInput(seeded.finishedRunId)],
      ['step', () => ui.getStep(seeded.failedRunId, 'only')],
      ['step output', () => ui.stepOutput(seeded.finishedRunId, 'only')],
    ];
    const from = '2026-01-01T10:00:00Z';
    const to = '2026-01-01T12:00:00Z';
    const filters = [
      {},
      { workflow: 'wf_3' },
      { state: 'running' as const },
      { state: 'completed' as const },
      { state: 'failed' as const },
      { state: 'cancelled' as const },
      { state: 'failed' as const, workflow: 'wf_0' },
      { state: 'completed' as const, workflow: 'wf_5' },
      { from, to },
      { from },
      { to },
      { from, to, state: 'failed' as const },
      { from, to, workflow: 'wf_4' },
    ];
    for (const f of filters) {
      const name = `runs ${JSON.stringify(f)}`;
      calls.push([
        name,
        async () => {
          const first = await ui.listRuns({ ...f, limit: 50 });
          const older = first.next
            ? await ui.listRuns({ ...f, limit: 50, cursor: first.next, dir: 'older' })
            : first;
          if (older.prev) await ui.listRuns({ ...f, limit: 50, cursor: older.prev, dir: 'newer' });
        },
      ]);
    }
    for (const [name, call] of calls) {
      current = name;
      await call();
    }
    const seqScans = explained.flatMap((e) =>
      [...nodes(e.plan)]
        .filter((n) => n['Node Type'] === 'Seq Scan' && BIG_TABLES.has(String(n['Relation Name'])))
        .map(() => `${e.read}: ${e.text.replace(/\s+/g, ' ').slice(0, 300)}`),
    );
    expect(seqScans).toEqual([]);
    // Every read was explained (a wrapper that saw nothing would pass by accident).
    expect(new Set(explained.map((e) => e.read)).size).toBe(calls.length);
    expect(explained.length).toBeGreaterThan(40);
  });

  it('the test sees a sequential scan when a read has no index to use', async () => {
    // The detector itself: an unindexed filter on the seeded table plans a sequential scan.
    const { rows } = await db.pool.query(
      `EXPLAIN (FORMAT JSON) SELECT id FROM cyclone.cyclone_runs WHERE input_hash = 'x'`,
    );
    const scans = [...nodes(rows[0]['QUERY PLAN'])].filter((n) => n['Node Type'] === 'Seq Scan');
    expect(scans.length).toBeGreaterThan(0);
  });

  it('pages keep their order on the seeded history', async () => {
    const ui = explainingReads();
    const first = await ui.listRuns({ state: 'failed', limit: 100 });
    expect(first.items).toHaveLength(100);
    const created = first.items.map((r) => r.createdAt);
    expect([...created].sort().reverse()).toEqual(created);
    const next = await ui.listRuns({ state: 'failed', limit: 100, cursor: first.next as string });
    const [head] = next.items;
    expect(head).toBeDefined();
    expect((head?.createdAt as string) < (first.items[99]?.createdAt as string)).toBe(true);
  });
});
