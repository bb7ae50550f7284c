/**
 * The join race: many diamonds (a → b, c → d) run by several workers at once. b and c of a run
 * complete at nearly the same instant on different connections; the row-locked counters must
 * release d exactly once and complete the run exactly once.
 */
import {
  engineClientOptions,
  engineUrl,
  engineWorkerOptions,
  mapLimit,
  waitFor,
} from '@cyclone/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, newAction, newWorkflow, Worker } from '../src/index.js';
import { createTestDb, type TestDb } from './support/db.js';

const RUNS = 200;
const WORKERS = 4;
const CONCURRENCY = 20;

describe('join race', () => {
  let db: TestDb;
  const clients: Client[] = [];
  const workers: Worker[] = [];

  beforeAll(async () => {
    db = await createTestDb();
    await db.pool.query(`
      CREATE TABLE d_calls (run_id uuid NOT NULL, attempt int NOT NULL);
      -- Every transition of a run to 'completed', and of a step to 'completed', as it happens.
      CREATE TABLE run_completions (run_id uuid NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp());
      CREATE TABLE step_completions (run_id uuid NOT NULL, node text NOT NULL);
      CREATE FUNCTION record_run_completion() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN INSERT INTO run_completions (run_id) VALUES (NEW.id); RETURN NEW; END $$;
      CREATE TRIGGER run_completed AFTER UPDATE ON cyclone.cyclone_runs
        FOR EACH ROW WHEN (NEW.state = 'completed' AND OLD.state IS DISTINCT FROM 'completed')
        EXECUTE FUNCTION record_run_completion();
      CREATE FUNCTION record_step_completion() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN INSERT INTO step_completions (run_id, node) VALUES (NEW.run_id, NEW.node); RETURN NEW; END $$;
      CREATE TRIGGER step_completed AFTER UPDATE ON cyclone.cyclone_steps
        FOR EACH ROW WHEN (NEW.state = 'completed' AND OLD.state IS DISTINCT FROM 'completed')
        EXECUTE FUNCTION record_step_completion();
    `);
  });

  afterAll(async () => {
    await Promise.all(workers.map((w) => w.stop({ graceMs: 2_000 }).catch(() => {})));
    await Promise.all(clients.map((c) => c.close()));
    await db?.drop();
  });

  it(`${RUNS} diamonds on ${WORKERS} workers × ${CONCURRENCY}: every join once, every run completed once`, async () => {
    const dCalls = new Map<string, number>();
    const calls = { a: 0, b: 0, c: 0, d: 0 };
    const step = newAction('step', async (ctx, input: { n: number }) => {
      calls[ctx.node as keyof typeof calls]++;
      if (ctx.node === 'd') {
        dCalls.set(ctx.runId, (dCalls.get(ctx.runId) ?? 0) + 1);
        const tx = await ctx.completionTx();
        await tx.query('INSERT INTO d_calls (run_id, attempt) VALUES ($1, $2)', [
          ctx.runId,
          ctx.attempt,
        ]);
        return { n: input.n, b: ctx.upstream('b'), c: ctx.upstream('c') };
      }
      if (ctx.node !== 'a' && input.n % 2 === 0) {
        // Half of the runs complete b and c on their own completionTx, half without one.
        const tx = await ctx.completionTx();
        await tx.query('SELECT 1');
      }
      return { node: ctx.node, n: input.n };
    });
    const diamond = newWorkflow('diamond', {
      nodes: {
        a: { action: step },
        b: { action: step, after: ['a'] },
        c: { action: step, after: ['a'] },
        d: { action: step, after: ['b', 'c'] },
      },
    });

    for (let i = 0; i < WORKERS; i++) {
      const client = new Client({
        connectionString: engineUrl(db.url),
        poolSize: 2,
        ...engineClientOptions,
      });
      clients.push(client);
      // A small pool per worker keeps the whole test suite under the server's max_connections.
      const worker = new Worker({
        client,
        workflows: [diamond],
        concurrency: CONCURRENCY,
        poolSize: 6,
        pollIntervalMs: 200,
        ...engineWorkerOptions,
      });
      workers.push(worker);
    }
    await Promise.all(workers.map((w) => w.start()));

    const submitter = clients[0] as Client;
    const runIds = await mapLimit(
      Array.from({ length: RUNS }, (_, i) => i),
      2,
      async (n) => (await submitter.submit(diamond, { n })).runId,
    );
    expect(new Set(runIds).size).toBe(RUNS);

    await waitFor(
      'every run to finish',
      async () => {
        const { rows } = await db.pool.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM cyclone.cyclone_runs WHERE state <> 'running'`,
        );
        return rows[0]?.n === RUNS;
      },
      { timeoutMs: 90_000, intervalMs: 100 },
    );

    // Every run completed, with consistent counters.
    const runs = await db.pool.query<{
      id: string;
      state: string;
      steps_remaining: number;
      steps_active: number;
      completed_at: Date | null;
    }>('SELECT id, state, steps_remaining, steps_active, completed_at FROM cyclone.cyclone_runs');
    expect(runs.rows).toHaveLength(RUNS);
    for (const r of runs.rows) {
      expect(r).toMatchObject({ state: 'completed', steps_remaining: 0, steps_active: 0 });
      expect(r.completed_at).toBeInstanceOf(Date);
    }

    // Every step completed at its first attempt, with nothing left pending.
    const steps = await db.pool.query<{
      state: string;
      attempt: number;
      deps_remaining: number;
      n: number;
    }>(
      `SELECT state, attempt, deps_remaining, count(*)::int AS n FROM cyclone.cyclone_steps
       GROUP BY state, attempt, deps_remaining`,
    );
    expect(steps.rows).toEqual([
      { state: 'completed', attempt: 1, deps_remaining: 0, n: RUNS * 4 },
    ]);

    // The join handler ran exactly once per run (JS counter and its completionTx row).
    expect(dCalls.size).toBe(RUNS);
    for (const id of runIds) expect(dCalls.get(id)).toBe(1);
    expect(calls).toEqual({ a: RUNS, b: RUNS, c: RUNS, d: RUNS });
    const d = await db.pool.query<{ run_id: string; n: number }>(
      'SELECT run_id, count(*)::int AS n FROM d_calls GROUP BY run_id',
    );
    expect(d.rows).toHaveLength(RUNS);
    for (const r of d.rows) expect(r.n).toBe(1);

    // Each run became completed exactly once, each step exactly once.
    const rc = await db.pool.query<{ run_id: string; n: number }>(
      'SELECT run_id, count(*)::int AS n FROM run_completions GROUP BY run_id',
    );
    expect(rc.rows).toHaveLength(RUNS);
    for (const r of rc.rows) expect(r.n).toBe(1);
    const sc = await db.pool.query<{ n: number; distinct_steps: number }>(
      'SELECT count(*)::int AS n, count(DISTINCT (run_id, node))::int AS distinct_steps FROM step_completions',
    );
    expect(sc.rows[0]).toEqual({ n: RUNS * 4, distinct_steps: RUNS * 4 });

    // The d outputs carry both upstream outputs.
    const out = await db.pool.query<{ output: { b: unknown; c: unknown } }>(
      `SELECT output FROM cyclone.cyclone_steps WHERE node = 'd' LIMIT 1`,
    );
    expect(out.rows[0]?.output.b).toMatchObject({ node: 'b' });
    expect(out.rows[0]?.output.c).toMatchObject({ node: 'c' });
  });
});
