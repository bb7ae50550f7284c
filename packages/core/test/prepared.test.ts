/**
 * Prepared statements (issue 8): the engine's hot statements go as named statements, parsed once
 * per connection. Two schemas sharing one connection never collide (the name is derived from the
 * statement text, which carries the schema), a migration that alters a table does not break
 * statements prepared before it, and `preparedStatements: false` (for a transaction-pooling
 * proxy) sends none.
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, newAction, newWorkflow, Worker } from '../src/index.js';
import { claimStepsSql } from '../src/sql/claim.js';
import {
  completeStepLeafSql,
  completeStepOnTxSql,
  completeStepSql,
  completeStepsLeafSql,
  completeStepsSql,
  skipStepSql,
} from '../src/sql/complete.js';
import { claimLimitedSql } from '../src/sql/flow.js';
import { extendLeasesSql } from '../src/sql/heartbeat.js';
import { countSkippedSql } from '../src/sql/schedules.js';
import { preparedName } from '../src/sql/statement.js';
import { sweepExpiredLeasesSql } from '../src/sql/sweep.js';
import { createTestDb, type TestDb } from './support/db.js';

const echo = newAction('prepared_echo', async (ctx, input: { n: number }) => ({
  n: input.n,
  node: ctx.node,
}));
const Flow = newWorkflow<{ n: number }>('prepared_flow', {
  nodes: { a: { action: echo }, b: { action: echo, after: ['a'] } },
});

/** Names of the statements prepared on the connection `c`. */
async function preparedNames(c: pg.PoolClient): Promise<string[]> {
  const { rows } = await c.query<{ name: string }>(
    'SELECT name FROM pg_prepared_statements ORDER BY name',
  );
  return rows.map((r) => r.name);
}

/** The plan of the statement prepared as `name` on `c`, executed with the literal arguments `args`. */
async function explain(c: pg.ClientBase, name: string, args: string): Promise<string> {
  const { rows } = await c.query<{ 'QUERY PLAN': string }>(`EXPLAIN EXECUTE ${name}(${args})`);
  return rows.map((r) => r['QUERY PLAN']).join('\n');
}

/** The plan of `text` prepared as `name` on `c`, executed with the literal arguments `args`. */
async function planOf(c: pg.ClientBase, name: string, text: string, args: string): Promise<string> {
  await c.query(`PREPARE ${name} AS ${text}`);
  return explain(c, name, args);
}

/** Statements to plan: name, text, literal arguments. */
type Planned = readonly (readonly [name: string, text: string, args: string])[];

/** The plans of `statements` prepared on `c` (`planOf` each; the plans stay cached there), by name. */
async function planAll(c: pg.ClientBase, statements: Planned): Promise<Record<string, string>> {
  const plans: Record<string, string> = {};
  for (const [name, text, args] of statements) plans[name] = await planOf(c, name, text, args);
  return plans;
}

/** The plans `c` has for `statements`, prepared there already (`planAll`), by name. */
async function explainAll(c: pg.ClientBase, statements: Planned): Promise<Record<string, string>> {
  const plans: Record<string, string> = {};
  for (const [name, , args] of statements) plans[name] = await explain(c, name, args);
  return plans;
}

async function runAll(client: Client, count: number, workerOptions: object = {}) {
  const worker = new Worker({ client, workflows: [Flow], concurrency: 5, ...workerOptions });
  await worker.start();
  try {
    const ids = [];
    for (let n = 0; n < count; n++) ids.push((await client.submit(Flow, { n })).runId);
    for (const id of ids) {
      const run = await client.waitForRun(id, { timeoutMs: 20_000 });
      expect(run.state).toBe('completed');
    }
  } finally {
    await worker.stop({ graceMs: 2_000 });
  }
}

describe('prepared statements', () => {
  let db: TestDb;

  beforeAll(async () => {
    db = await createTestDb();
  });
  afterAll(async () => {
    await db?.drop();
  });

  it('two schemas on one shared connection each get their own statements', async () => {
    // One connection for both clients and their workers: every statement of both schemas is
    // prepared on it, and a name collision would run one schema's statement on the other.
    const shared = new pg.Pool({ connectionString: db.url, max: 1 });
    try {
      const a = new Client({ pool: shared, schema: 'prep_a' });
      const b = new Client({ pool: shared, schema: 'prep_b' });
      await a.migrate();
      await b.migrate();
      await runAll(a, 5);
      await runAll(b, 5);
      const count = async (schema: string) =>
        (
          await shared.query(
            `SELECT count(*)::int AS n FROM ${schema}.cyclone_runs WHERE state = 'completed'`,
          )
        ).rows[0].n;
      expect(await count('prep_a')).toBe(5);
      expect(await count('prep_b')).toBe(5);
      const c = await shared.connect();
      try {
        // The one connection holds the claim statement of each schema under its own name.
        const names = await preparedNames(c);
        const claims = (
          await c.query<{ name: string }>(
            `SELECT name FROM pg_prepared_statements WHERE statement LIKE '%FOR UPDATE SKIP LOCKED%'
               AND statement LIKE '%SET state = ''running''%'`,
          )
        ).rows.map((r) => r.name);
        expect(claims.length).toBe(2);
        expect(new Set(names).size).toBe(names.length);
      } finally {
        c.release();
      }
    } finally {
      await shared.query(
        'DROP SCHEMA IF EXISTS prep_a CASCADE; DROP SCHEMA IF EXISTS prep_b CASCADE',
      );
      await shared.end();
    }
  });

  it('statements are prepared on the connection and survive a column added to the tables', async () => {
    const pool = new pg.Pool({ connectionString: db.url, max: 1 });
    try {
      const client = new Client({ pool, schema: 'prep_c' });
      await client.migrate();
      const c0 = await pool.connect();
      // Nothing of ours is prepared yet on this (the only) connection.
      expect((await preparedNames(c0)).filter((n) => n.startsWith('cyclone_'))).toEqual([]);
      c0.release();
      await client.submit(Flow, { n: 1 });
      const c1 = await pool.connect();
      const afterSubmit = (await preparedNames(c1)).filter((n) => n.startsWith('cyclone_'));
      c1.release();
      expect(afterSubmit.length).toBe(1);
      // A later migration adds a column: PostgreSQL re-plans the prepared statements.
      await pool.query('ALTER TABLE prep_c.cyclone_steps ADD COLUMN later_column int');
      await pool.query('ALTER TABLE prep_c.cyclone_runs ADD COLUMN later_column int');
      const second = await client.submit(Flow, { n: 2 });
      expect(second.runId).toMatch(/^[0-9a-f-]{36}$/);
      await pool.query('DROP SCHEMA prep_c CASCADE');
    } finally {
      await pool.end();
    }
  });

  it('preparedStatements: false sends no named statement', async () => {
    const pool = new pg.Pool({ connectionString: db.url, max: 6 });
    try {
      const client = new Client({ pool, schema: 'prep_d', preparedStatements: false });
      await client.migrate();
      await runAll(client, 5);
      const clients = await Promise.all(Array.from({ length: 6 }, () => pool.connect()));
      try {
        for (const c of clients) {
          expect((await preparedNames(c)).filter((n) => n.startsWith('cyclone_'))).toEqual([]);
        }
      } finally {
        for (const c of clients) c.release();
      }
      await pool.query('DROP SCHEMA prep_d CASCADE');
    } finally {
      await pool.end();
    }
  });
});

describe('the worker control connections', () => {
  it('claim without bitmap scans, so a fresh backlog is read in claim-index order', async () => {
    const db = await createTestDb();
    try {
      const client = new Client({ connectionString: db.url, poolSize: 2 });
      const worker = new Worker({ client, workflows: [Flow] });
      try {
        const control = (worker as unknown as { controlPool: pg.Pool }).controlPool;
        const { rows } = await control.query<{ enable_bitmapscan: string }>(
          'SHOW enable_bitmapscan',
        );
        expect(rows[0]?.enable_bitmapscan).toBe('off');
        const plans = await control.query<{ plan_cache_mode: string }>('SHOW plan_cache_mode');
        expect(plans.rows[0]?.plan_cache_mode).toBe('force_generic_plan');
        // No JIT: a generic plan's estimate for a large backlog would compile every claim.
        const jit = await control.query<{ jit: string }>('SHOW jit');
        expect(jit.rows[0]?.jit).toBe('off');
        // No sequential scan where an index serves: plans made on empty tables stay cached.
        const seq = await control.query<{ enable_seqscan: string }>('SHOW enable_seqscan');
        expect(seq.rows[0]?.enable_seqscan).toBe('off');
        // The step pool (where handlers' completionTx queries run) keeps the server's setting.
        const steps = (worker as unknown as { pool: pg.Pool }).pool;
        const s = await steps.query<{ enable_bitmapscan: string }>('SHOW enable_bitmapscan');
        expect(s.rows[0]?.enable_bitmapscan).toBe('on');
      } finally {
        await worker.stop();
        await client.close();
      }
    } finally {
      await db.drop();
    }
  });
});

describe('plans on a table never analyzed', () => {
  it("a worker's control connection keeps claiming and completing by the primary key after the table it planned on empty has grown", async () => {
    const db = await createTestDb();
    const client = new Client({ connectionString: db.url, poolSize: 1 });
    const worker = new Worker({ client, workflows: [Flow] });
    const fill = new pg.Client({ connectionString: db.url });
    await fill.connect();
    const control = await (worker as unknown as { controlPool: pg.Pool }).controlPool.connect();
    try {
      // Planned while the tables are empty (a worker started on a new schema): the generic plans
      // stay cached on the connection until the statistics change, and autovacuum may not have
      // analyzed the tables for a minute, or at all where it is off.
      const statements = [
        ['p_claim', claimStepsSql('cyclone'), `'{h}', 500, 'w', 5000, '{h/a}'`],
        [
          'p_claim_limited',
          claimLimitedSql('cyclone'),
          `'lim', '{h}', '{h/a}', 500, 'w', 5000, 10000, NULL, NULL, NULL, NULL, NULL, '', 100, 500`,
        ],
        ['p_complete', completeStepsSql('cyclone'), `'{}', '{}', '{}', '{}', 'ch'`],
        ['p_complete_leaf', completeStepsLeafSql('cyclone'), `'{}', '{}', '{}', '{}'`],
        ['p_beat', extendLeasesSql('cyclone'), `'{}', '{}', '{}', '{}', 5000`],
        ['p_sweep', sweepExpiredLeasesSql('cyclone'), `1000, 'ch'`],
        ['p_skip', countSkippedSql('cyclone'), `'s', true`],
      ] as const;
      await planAll(control, statements);
      // Then 20,000 runs and their steps, finished and claimable, and no ANALYZE.
      await fill.query(`
        INSERT INTO cyclone.cyclone_runs (id, workflow, state, input, input_hash, steps_remaining,
                                          steps_active)
        SELECT gen_random_uuid(), 'h', 'running', '{}', 'x', 1, 1 FROM generate_series(1, 20000);
        INSERT INTO cyclone.cyclone_steps (run_id, node, workflow, action, state, attempt,
                                           max_attempts, deps_remaining, flow, scheduled_at)
        SELECT id, 'a', 'h', CASE WHEN n % 2 = 0 THEN 'h' ELSE 'lim' END, 'available', 0, 3, 0,
               CASE WHEN n % 2 = 1 THEN 2 ELSE 0 END, now() - interval '1 minute'
        FROM (SELECT id, row_number() OVER () AS n FROM cyclone.cyclone_runs) r;
        INSERT INTO cyclone.cyclone_schedules (name, cron, timezone, workflow, last_run_id)
        SELECT 's', '* * * * *', 'UTC', 'h', id FROM cyclone.cyclone_runs LIMIT 1`);
      const after = await explainAll(control, statements);
      for (const [name] of statements) {
        // Planned for an empty table, the claim's UPDATE hashed a Seq Scan of every step (and
        // the completions, heartbeat and sweep scanned them too), and the overlap check read
        // every running run into a hashed subplan.
        expect(after[name], name).not.toContain('Seq Scan on cyclone_');
        expect(after[name], name).not.toContain('Hash Join');
        expect(after[name], name).not.toContain('hashed SubPlan');
      }
    } finally {
      control.release();
      await fill.end();
      await worker.stop();
      await client.close();
      await db.drop();
    }
  });
});

describe('plans of the single-step completions on a table never analyzed', () => {
  it('release the downstream nodes by the primary key after the tables they were planned on empty have grown, under the server settings of the step pool', async () => {
    const db = await createTestDb();
    const c = new pg.Client({ connectionString: db.url });
    await c.connect();
    try {
      // The step pool keeps the server's planner settings; a generic plan made on the empty
      // tables (forced here, where auto mode would choose it after five executions) stays.
      await c.query('SET plan_cache_mode = force_generic_plan');
      const id = `'00000000-0000-0000-0000-000000000001'`;
      const statements = [
        ['p_on_tx', completeStepOnTxSql('cyclone'), `${id}, 'a', 1, 'null', 'ch', '5000'`],
        ['p_one', completeStepSql('cyclone'), `${id}, 'a', 1, 'null', 'ch'`],
        ['p_skip_one', skipStepSql('cyclone'), `${id}, 'a', 1, 'null', 'ch'`],
      ] as const;
      await planAll(c, statements);
      // 20,000 runs of two nodes, a then b, and no ANALYZE.
      await c.query(`
        INSERT INTO cyclone.cyclone_runs (id, workflow, state, input, input_hash, steps_remaining,
                                          steps_active)
        SELECT gen_random_uuid(), 'h', 'running', '{}', 'x', 2, 1 FROM generate_series(1, 20000);
        INSERT INTO cyclone.cyclone_steps (run_id, node, workflow, action, state, attempt,
                                           max_attempts, deps_remaining, downstream)
        SELECT id, n.node, 'h', 'h', CASE WHEN n.node = 'a' THEN 'running' ELSE 'pending' END,
               1, 3, CASE WHEN n.node = 'a' THEN 0 ELSE 1 END,
               CASE WHEN n.node = 'a' THEN '{b}'::text[] ELSE '{}'::text[] END
        FROM cyclone.cyclone_runs, (VALUES ('a'), ('b')) AS n(node)`);
      const after = await explainAll(c, statements);
      for (const [name] of statements) {
        // Without the run in the released rows' join: a Hash Join over a Seq Scan of every step.
        expect(after[name], name).not.toContain('Seq Scan on cyclone_steps');
      }
    } finally {
      await c.end();
      await db.drop();
    }
  });
});

describe('plans of the prepared statements', () => {
  it('completion and heartbeat go by the primary key, the sweep by the lease index, under generic plans with a large history', async () => {
    const db = await createTestDb();
    const c = new pg.Client({ connectionString: db.url });
    await c.connect();
    try {
      // A finished history (statistics then see almost no running step), then 200 running steps.
      await c.query(`
        INSERT INTO cyclone.cyclone_runs (id, workflow, state, input, input_hash, steps_remaining,
                                          steps_active, completed_at)
        SELECT gen_random_uuid(), 'h', CASE WHEN g <= 200 THEN 'running' ELSE 'completed' END,
               '{}', 'x', CASE WHEN g <= 200 THEN 1 ELSE 0 END, CASE WHEN g <= 200 THEN 1 ELSE 0 END,
               CASE WHEN g <= 200 THEN NULL ELSE now() END
        FROM generate_series(1, 30000) g;
        INSERT INTO cyclone.cyclone_steps (run_id, node, workflow, action, state, attempt,
                                           max_attempts, deps_remaining, lease_owner, lease_expires_at)
        SELECT id, 'a', 'h', 'h', CASE WHEN state = 'running' THEN 'running' ELSE 'completed' END, 1, 3, 0,
               CASE WHEN state = 'running' THEN 'w' END,
               CASE WHEN state = 'running' THEN now() + interval '1 minute' END
        FROM cyclone.cyclone_runs;
        ANALYZE cyclone.cyclone_runs; ANALYZE cyclone.cyclone_steps;
        SET plan_cache_mode = force_generic_plan;`);
      const plan = (name: string, text: string, args: string) => planOf(c, name, text, args);
      const complete = await plan(
        'p_complete',
        completeStepsSql('cyclone'),
        `'{}', '{}', '{}', '{}', 'ch'`,
      );
      expect(complete).toContain('cyclone_steps_pkey');
      expect(complete).not.toContain('cyclone_steps_leases');
      const leaf = await plan(
        'p_complete_leaf',
        completeStepsLeafSql('cyclone'),
        `'{}', '{}', '{}', '{}'`,
      );
      expect(leaf).toContain('cyclone_steps_pkey');
      expect(leaf).not.toContain('cyclone_steps_leases');
      const beat = await plan('p_beat', extendLeasesSql('cyclone'), `'{}', '{}', '{}', '{}', 5000`);
      expect(beat).toContain('cyclone_steps_pkey');
      expect(beat).not.toContain('cyclone_steps_leases');
      const sweep = await plan('p_sweep', sweepExpiredLeasesSql('cyclone'), `1000, 'ch'`);
      expect(sweep).toContain('cyclone_steps_leases');
      // The heartbeat of many steps after the statistics were taken (a burst of claims): every
      // step by its primary key, never a scan of the table joined to the batch row by row
      // (that was quadratic: 9.5 s for 10,000 steps in flight).
      await c.query(`
        INSERT INTO cyclone.cyclone_runs (id, workflow, state, input, input_hash, steps_remaining,
                                          steps_active)
        SELECT gen_random_uuid(), 'h', 'running', '{}', 'x', 1, 1 FROM generate_series(1, 3000);
        INSERT INTO cyclone.cyclone_steps (run_id, node, workflow, action, state, attempt,
                                           max_attempts, deps_remaining, lease_owner, lease_expires_at)
        SELECT id, 'a', 'h', 'h', 'running', 1, 3, 0, 'burst', now() + interval '1 minute'
        FROM cyclone.cyclone_runs r
        WHERE r.state = 'running' AND NOT EXISTS
          (SELECT 1 FROM cyclone.cyclone_steps s WHERE s.run_id = r.id)`);
      const burst = (
        await c.query<{ run_id: string }>(
          `SELECT run_id FROM cyclone.cyclone_steps WHERE lease_owner = 'burst'`,
        )
      ).rows.map((r) => r.run_id);
      expect(burst).toHaveLength(3000);
      // EXPLAIN EXECUTE takes no bind parameters: the arrays go as literals (test data).
      const list = (xs: unknown[]) => c.escapeLiteral(`{${xs.join(',')}}`);
      const { rows: beatPlan } = await c.query<{ 'QUERY PLAN': string }>(
        `EXPLAIN EXECUTE p_beat(${list(burst)}, ${list(burst.map(() => 'a'))}, ${list(burst.map(() => 1))}, ${list(burst.map(() => 'burst'))}, 5000)`,
      );
      const burstPlan = beatPlan.map((r) => r['QUERY PLAN']).join('\n');
      expect(burstPlan).not.toContain('Seq Scan on cyclone_steps');
      expect(burstPlan).not.toContain('Join Filter');
    } finally {
      await c.end();
      await db.drop();
    }
  });
});

describe('plans of the claims', () => {
  it('the claims lease each step by its primary key, never by hashing the table, under generic plans of analyzed tables with a finished history', async () => {
    const db = await createTestDb();
    const c = new pg.Client({ connectionString: db.url });
    await c.connect();
    try {
      // A backlog that is most of the table, as after a burst of submissions: 5,000 finished
      // steps, 20,000 claimable of flow 0 and 20,000 of a limited action.
      await c.query(`
        INSERT INTO cyclone.cyclone_runs (id, workflow, state, input, input_hash, steps_remaining,
                                          steps_active, completed_at)
        SELECT gen_random_uuid(), 'h', CASE WHEN g <= 40000 THEN 'running' ELSE 'completed' END,
               '{}', 'x', CASE WHEN g <= 40000 THEN 1 ELSE 0 END,
               CASE WHEN g <= 40000 THEN 1 ELSE 0 END, CASE WHEN g <= 40000 THEN NULL ELSE now() END
        FROM generate_series(1, 45000) g;
        INSERT INTO cyclone.cyclone_steps (run_id, node, workflow, action, state, attempt,
                                           max_attempts, deps_remaining, flow, scheduled_at)
        SELECT id, 'a', 'h', CASE WHEN n % 2 = 0 THEN 'h' ELSE 'lim' END,
               CASE WHEN state = 'running' THEN 'available' ELSE 'completed' END, 0, 3, 0,
               CASE WHEN state = 'running' AND n % 2 = 1 THEN 2 ELSE 0 END,
               now() - interval '1 minute'
        FROM (SELECT id, state, row_number() OVER () AS n FROM cyclone.cyclone_runs) r;
        ANALYZE cyclone.cyclone_runs; ANALYZE cyclone.cyclone_steps;
        SET plan_cache_mode = force_generic_plan;`);
      const plan = (name: string, text: string, args: string) => planOf(c, name, text, args);
      // Joined to the claimed rows as a CTE (estimated at 10 % of the candidates), the UPDATE
      // hashed all 45,000 steps on every claim.
      const claim = await plan(
        'p_claim',
        claimStepsSql('cyclone'),
        `'{h}', 500, 'w', 5000, '{h/a}'`,
      );
      expect(claim).not.toContain('Seq Scan on cyclone_steps');
      expect(claim).not.toContain('Hash Join');
      expect(claim).toMatch(/Update on cyclone_steps[\s\S]*Index Scan using cyclone_steps_pkey/);
      const limited = await plan(
        'p_claim_limited',
        claimLimitedSql('cyclone'),
        `'lim', '{h}', '{h/a}', 500, 'w', 5000, 10000, NULL, NULL, NULL, NULL, NULL, '', 100, 500`,
      );
      expect(limited).not.toContain('Seq Scan on cyclone_steps');
      expect(limited).toMatch(/Update on cyclone_steps[\s\S]*Index Scan using cyclone_steps_pkey/);
    } finally {
      await c.end();
      await db.drop();
    }
  });
});

describe('the single-step completion', () => {
  it('keeps a generic plan (planned once per connection, not on every completion)', async () => {
    const db = await createTestDb();
    const client = new Client({ connectionString: db.url, poolSize: 1 });
    const c = new pg.Client({ connectionString: db.url });
    await c.connect();
    try {
      // A table of some size, analyzed, as in production (on a near-empty one the planner's
      // costs differ and even the array form keeps a generic plan).
      await client.submitMany(
        Flow,
        Array.from({ length: 3_000 }, (_, n) => ({ n })),
      );
      await c.query('ANALYZE cyclone.cyclone_steps; ANALYZE cyclone.cyclone_runs');
      const { rows } = await c.query<{ run_id: string; node: string; attempt: number }>(
        claimStepsSql('"cyclone"'),
        [['prepared_flow'], 10, 'w', 60_000, ['prepared_flow/a', 'prepared_flow/b']],
      );
      expect(rows).toHaveLength(10);
      const statement = {
        name: preparedName('complete_step', completeStepSql('"cyclone"')),
        text: completeStepSql('"cyclone"'),
      };
      for (const r of rows) {
        const done = await c.query(statement, [r.run_id, r.node, r.attempt, '{"ok":true}', 'ch']);
        expect(done.rows).toHaveLength(1);
      }
      // The leaf form: the b steps the completions above made claimable, each a leaf.
      const { rows: leaves } = await c.query<{
        run_id: string;
        node: string;
        attempt: number;
        leaf: boolean;
      }>(claimStepsSql('"cyclone"'), [['prepared_flow'], 10, 'w', 60_000, ['prepared_flow/b']]);
      expect(leaves).toHaveLength(10);
      const leafStatement = {
        name: preparedName('complete_step_leaf', completeStepLeafSql('"cyclone"')),
        text: completeStepLeafSql('"cyclone"'),
      };
      for (const r of leaves) {
        expect(r.leaf).toBe(true);
        const done = await c.query(leafStatement, [r.run_id, r.node, r.attempt, '{"ok":true}']);
        expect(done.rows).toHaveLength(1);
      }
      for (const name of [statement.name, leafStatement.name]) {
        const { rows: stats } = await c.query<{ generic_plans: string; custom_plans: string }>(
          'SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE name = $1',
          [name],
        );
        // PostgreSQL tries five custom plans, then keeps the generic one when it is no dearer.
        expect(Number(stats[0]?.custom_plans)).toBeLessThanOrEqual(5);
        expect(Number(stats[0]?.generic_plans)).toBeGreaterThanOrEqual(5);
      }
    } finally {
      await c.end();
      await client.close();
      await db.drop();
    }
  });
});
