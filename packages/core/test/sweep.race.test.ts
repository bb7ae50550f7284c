/**
 * The recovery sweep against concurrent fenced completions, failures and re-claims. Many
 * `running` steps with expired leases are made directly in SQL; then the sweep statement runs
 * in loops on two connections while other connections complete or fail the same steps (each
 * in a transaction held open briefly) and a claimer re-claims what becomes claimable. Triggers
 * record every transition, so a reopened completed step shows even if it were later repaired.
 */
import { mapLimit } from '@cyclone/testkit';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, newAction, newWorkflow } from '../src/index.js';
import { claimStepsSql } from '../src/sql/claim.js';
import { completeStepsSql, failStepSql } from '../src/sql/complete.js';
import { sweepExpiredLeasesSql } from '../src/sql/sweep.js';
import { createTestDb, type TestDb } from './support/db.js';

const Q = '"cyclone"';
const CHANNEL = 'cyclone_cyclone';
const ROUNDS = 10;
const RUNS_PER_ROUND = 60;

const noop = newAction('sw_noop', async () => null);
const wf = newWorkflow('sw', {
  nodes: {
    x: { action: noop },
    y: { action: noop },
    w: { action: noop },
    z: { action: noop, after: ['x', 'y'] },
  },
});

type Op = 'complete' | 'fail' | 'none';
interface Racer {
  runId: string;
  node: string;
  op: Op;
  maxAttempts: number;
  /** What our own statement reported: the fence matched (complete: done = 1; fail: a row). */
  won?: boolean;
}

interface StepRow {
  run_id: string;
  node: string;
  state: string;
  attempt: number;
  max_attempts: number;
  deps_remaining: number;
  lease_owner: string | null;
  output: unknown;
  errors: { attempt: number; kind: string }[];
}

const isDeadlock = (err: unknown) => (err as { code?: string }).code === '40P01';

describe('recovery sweep races', () => {
  let db: TestDb;
  let client: Client;
  let ops: pg.Pool;
  const deadlocks = { sweep: 0, ops: 0 };

  beforeAll(async () => {
    db = await createTestDb();
    client = new Client({ connectionString: db.url, poolSize: 4 });
    ops = new pg.Pool({ connectionString: db.url, max: 8 });
    ops.on('error', () => {});
    await db.pool.query(`
      -- A step leaving a terminal state: never allowed here (no operator retry in this test).
      CREATE TABLE reopened (run_id uuid, node text, old_state text, new_state text);
      -- Each end of a claim (running at attempt n → anything else): at most once per attempt.
      CREATE TABLE endings (run_id uuid, node text, attempt int, new_state text);
      CREATE FUNCTION watch_steps() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF OLD.state IN ('completed', 'discarded') AND NEW.state <> OLD.state THEN
          INSERT INTO reopened VALUES (NEW.run_id, NEW.node, OLD.state, NEW.state);
        END IF;
        IF OLD.state = 'running' AND (NEW.state <> 'running' OR NEW.attempt <> OLD.attempt) THEN
          INSERT INTO endings VALUES (NEW.run_id, NEW.node, OLD.attempt, NEW.state);
        END IF;
        RETURN NEW;
      END $$;
      CREATE TRIGGER watch_steps AFTER UPDATE ON cyclone.cyclone_steps
        FOR EACH ROW EXECUTE FUNCTION watch_steps();
    `);
  });

  afterAll(async () => {
    await ops?.end();
    await client?.close();
    await db?.drop();
  });

  /** Submits runs and turns their racing steps into `running` with an expired lease. */
  async function setUpRound(round: number): Promise<{ runIds: string[]; racers: Racer[] }> {
    const runIds = await mapLimit(
      Array.from({ length: RUNS_PER_ROUND }, (_, i) => i),
      4,
      async (i) => (await client.submit(wf, { round, i })).runId,
    );
    const racers: Racer[] = [];
    const alive: string[] = [];
    runIds.forEach((runId, i) => {
      const maxAttempts = i % 2 === 0 ? 1 : 3;
      const nodes = i % 3 === 0 ? ['x', 'y'] : ['x', 'y', 'w'];
      if (i % 3 === 0) alive.push(runId);
      for (const node of nodes) {
        const r = Math.random();
        racers.push({
          runId,
          node,
          op: r < 0.55 ? 'complete' : r < 0.8 ? 'fail' : 'none',
          maxAttempts,
        });
      }
    });
    // Expired leases of an old worker, expiring at slightly different times.
    await db.pool.query(
      `UPDATE cyclone.cyclone_steps s
       SET state = 'running', attempt = 1, lease_owner = 'old-worker',
           lease_expires_at = now() - (random() * interval '50 ms') - interval '1 ms',
           max_attempts = r.max_attempts, started_at = now()
       FROM unnest($1::uuid[], $2::text[], $3::int[]) AS r(run_id, node, max_attempts)
       WHERE s.run_id = r.run_id AND s.node = r.node`,
      [racers.map((r) => r.runId), racers.map((r) => r.node), racers.map((r) => r.maxAttempts)],
    );
    // Every third run has a step whose lease is alive: the sweep must never touch it.
    await db.pool.query(
      `UPDATE cyclone.cyclone_steps SET state = 'running', attempt = 1, lease_owner = 'alive-worker',
         lease_expires_at = now() + interval '1 hour', started_at = now()
       WHERE run_id = ANY($1::uuid[]) AND node = 'w'`,
      [alive],
    );
    return { runIds, racers };
  }

  /** One fenced completion or failure in its own transaction, held open a moment. */
  async function race(r: Racer): Promise<void> {
    if (r.op === 'none') return;
    for (;;) {
      const c = await ops.connect();
      try {
        await c.query('BEGIN');
        if (r.op === 'complete') {
          const res = await c.query(completeStepsSql(Q), [
            [r.runId],
            [r.node],
            [1],
            [JSON.stringify({ by: 'completer', node: r.node })],
            CHANNEL,
          ]);
          r.won = res.rows.length === 1;
        } else {
          const entry = {
            attempt: 1,
            at: new Date().toISOString(),
            kind: 'error',
            message: 'boom',
          };
          const res = await c.query(failStepSql(Q), [
            r.runId,
            r.node,
            1,
            JSON.stringify(entry),
            0,
            false,
            CHANNEL,
            'sw',
            0,
          ]);
          r.won = res.rows.length === 1;
        }
        await c.query('SELECT pg_sleep($1)', [Math.random() * 0.003]);
        await c.query('COMMIT');
        return;
      } catch (err) {
        await c.query('ROLLBACK').catch(() => {});
        if (!isDeadlock(err)) throw err;
        deadlocks.ops++;
        r.won = undefined;
      } finally {
        c.release();
      }
    }
  }

  it(`${ROUNDS} rounds: no step that completed, failed or was re-claimed is reopened by the sweep`, async () => {
    const sweepers = [
      new pg.Client({ connectionString: db.url }),
      new pg.Client({ connectionString: db.url }),
    ];
    const claimer = new pg.Client({ connectionString: db.url });
    await Promise.all([...sweepers, claimer].map((c) => c.connect()));
    try {
      for (let round = 0; round < ROUNDS; round++) {
        const { runIds, racers } = await setUpRound(round);
        const swept = new Map<string, number>(); // `${runId}:${node}` → attempt swept
        const claimed: { runId: string; node: string; attempt: number }[] = [];
        let opsDone = false;

        const sweepLoop = async (c: pg.Client) => {
          for (;;) {
            let rows: { run_id: string; node: string; attempt: number }[];
            try {
              ({ rows } = await c.query(sweepExpiredLeasesSql(Q), [3, CHANNEL]));
            } catch (err) {
              if (!isDeadlock(err)) throw err;
              deadlocks.sweep++;
              continue;
            }
            for (const s of rows) {
              const k = `${s.run_id}:${s.node}`;
              expect(swept.has(k), `${k} swept twice`).toBe(false);
              swept.set(k, s.attempt);
            }
            if (opsDone && rows.length === 0) return;
            // A random pause so the sweep meets completions at every stage, not only first.
            await new Promise((r) => setTimeout(r, Math.random() * 8));
          }
        };
        const claimLoop = async () => {
          while (!opsDone) {
            const { rows } = await claimer.query<{ run_id: string; node: string; attempt: number }>(
              claimStepsSql(Q),
              [['sw'], 5, 'new-worker', 3_600_000, ['sw/x', 'sw/y', 'sw/w', 'sw/z']],
            );
            for (const r of rows)
              claimed.push({ runId: r.run_id, node: r.node, attempt: r.attempt });
          }
        };
        const shuffled = [...racers].sort(() => Math.random() - 0.5);
        const opsRun = mapLimit(shuffled, 8, race).finally(() => {
          opsDone = true;
        });
        await Promise.all([
          opsRun,
          sweepLoop(sweepers[0] as pg.Client),
          sweepLoop(sweepers[1] as pg.Client),
          claimLoop(),
        ]);
        // One last sweep after everything settled finds nothing.
        const last = await db.pool.query(sweepExpiredLeasesSql(Q), [1000, CHANNEL]);
        expect(last.rows).toEqual([]);

        const { rows: steps } = await db.pool.query<StepRow>(
          `SELECT run_id, node, state, attempt, max_attempts, deps_remaining, lease_owner, output, errors
           FROM cyclone.cyclone_steps WHERE run_id = ANY($1::uuid[])`,
          [runIds],
        );
        const step = (runId: string, node: string) =>
          steps.find((s) => s.run_id === runId && s.node === node) as StepRow;
        const claimedAt = new Map(claimed.map((c) => [`${c.runId}:${c.node}`, c.attempt]));

        for (const r of racers) {
          const s = step(r.runId, r.node);
          const k = `${r.runId}:${r.node}`;
          const wasSwept = swept.has(k);
          // Each expired claim ended exactly once: by our statement or by the sweep, never both.
          expect(Number(Boolean(r.won)) + Number(wasSwept), `${k} (${r.op}) fate`).toBe(1);
          if (r.op === 'complete' && r.won) {
            expect(s, k).toMatchObject({ state: 'completed', attempt: 1, errors: [] });
            expect(s.output).toEqual({ by: 'completer', node: r.node });
            continue;
          }
          expect(s.output, k).toBeNull();
          expect(s.errors, k).toHaveLength(1);
          expect(s.errors[0]?.attempt).toBe(1);
          expect(s.errors[0]?.kind).toBe(wasSwept ? 'lease_expired' : 'error');
          if (r.maxAttempts === 1) {
            expect(s, k).toMatchObject({ state: 'discarded', attempt: 1 });
          } else if (claimedAt.get(k) === 2) {
            expect(s, k).toMatchObject({ state: 'running', attempt: 2, lease_owner: 'new-worker' });
          } else {
            expect(s, k).toMatchObject({ state: 'retryable', attempt: 1, lease_owner: null });
          }
        }

        // Per run: the join's counter, the alive step, and the run's counters and state.
        const { rows: runs } = await db.pool.query<{
          id: string;
          state: string;
          steps_remaining: number;
          steps_active: number;
          completed_at: Date | null;
        }>(
          'SELECT id, state, steps_remaining, steps_active, completed_at FROM cyclone.cyclone_runs WHERE id = ANY($1::uuid[])',
          [runIds],
        );
        runIds.forEach((runId, i) => {
          const mine = steps.filter((s) => s.run_id === runId);
          const done = ['x', 'y'].filter((n) => step(runId, n).state === 'completed').length;
          const z = step(runId, 'z');
          expect(z.deps_remaining, `${runId} z deps`).toBe(2 - done);
          if (done === 2) {
            expect(['available', 'running']).toContain(z.state);
          } else {
            expect(z, `${runId} z`).toMatchObject({ state: 'pending', attempt: 0 });
          }
          if (i % 3 === 0) {
            expect(step(runId, 'w'), `${runId} alive w`).toMatchObject({
              state: 'running',
              attempt: 1,
              lease_owner: 'alive-worker',
              errors: [],
            });
          }
          const run = runs.find((r) => r.id === runId);
          const remaining = mine.filter((s) => s.state !== 'completed').length;
          const active = mine.filter((s) =>
            ['available', 'running', 'retryable'].includes(s.state),
          ).length;
          expect(run?.steps_remaining, `${runId} steps_remaining`).toBe(remaining);
          expect(run?.steps_active, `${runId} steps_active`).toBe(active);
          expect(run?.state, `${runId} state`).toBe(active === 0 ? 'failed' : 'running');
          expect(run?.completed_at === null, `${runId} completed_at`).toBe(active !== 0);
          // Nothing is left running under the old, expired lease.
          for (const s of mine) expect(s.lease_owner).not.toBe('old-worker');
        });
      }

      // Across all rounds: no terminal step ever left its state, no claim ended twice.
      const reopened = await db.pool.query('SELECT * FROM reopened');
      expect(reopened.rows).toEqual([]);
      const twice = await db.pool.query(
        `SELECT run_id, node, attempt, count(*)::int AS n FROM endings
         GROUP BY run_id, node, attempt HAVING count(*) > 1`,
      );
      expect(twice.rows).toEqual([]);
    } finally {
      await Promise.all([...sweepers, claimer].map((c) => c.end().catch(() => {})));
    }
  });

  it('concurrent sweeps and completions never deadlock', () => {
    // Deadlocks are retried above so the invariants can be checked; here they are counted.
    // Every worker sweeps (no leader), so a sweep that can deadlock with another sweep or with a
    // completion turns into failed statements and delayed recovery under load.
    expect(deadlocks).toEqual({ sweep: 0, ops: 0 });
  });
});
