/**
 * A completionTx whose completion statement loses a deadlock (a conflict between transactions,
 * not the handler's fault) gives its attempt back: the step runs again at once and never uses
 * up maxAttempts. Here an outside transaction holds the run's row and then asks for a row the
 * handler's transaction locked: the completion, the first to wait, is the deadlock's victim.
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, newAction, newWorkflow, Worker } from '../src/index.js';
import { createTestDb, type TestDb } from './support/db.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
let attempts = 0;
const locking = newAction(
  'conflict_locking',
  async (ctx) => {
    attempts++;
    const tx = await ctx.completionTx();
    await tx.query('SELECT k FROM public.conflict_rows WHERE k = 1 FOR UPDATE');
    await tx.query('INSERT INTO public.conflict_writes VALUES ($1, $2)', [ctx.runId, ctx.attempt]);
    return { attempt: ctx.attempt };
  },
  { maxAttempts: 1 },
);
const Flow = newWorkflow('conflict_flow', { nodes: { only: { action: locking } } });

describe('a completionTx that loses a deadlock', () => {
  let db: TestDb;
  let client: Client;

  beforeAll(async () => {
    db = await createTestDb();
    await db.pool.query(`
      CREATE TABLE public.conflict_rows (k int PRIMARY KEY); INSERT INTO public.conflict_rows VALUES (1);
      CREATE TABLE public.conflict_writes (run_id uuid, attempt int)`);
    client = new Client({ connectionString: db.url, poolSize: 2 });
  });
  afterAll(async () => {
    await client?.close();
    await db?.drop();
  });

  it('is retried with its attempt given back, and its writes land once', async () => {
    const { runId } = await client.submit(Flow, {});
    const outside = new pg.Client({ connectionString: db.url });
    await outside.connect();
    // The outside session checks for deadlocks late, so the completion (checking after the
    // server's deadlock_timeout, 1 s by default) is the one that finds the cycle.
    await outside.query("SET deadlock_timeout = '20s'");
    await outside.query('BEGIN');
    await outside.query('SELECT 1 FROM cyclone.cyclone_runs WHERE id = $1 FOR UPDATE', [runId]);
    const worker = new Worker({ client, workflows: [Flow] });
    await worker.start();
    try {
      // Wait until the completion statement waits for the run row the outside session holds.
      for (let i = 0; i < 200; i++) {
        const { rows } = await db.pool.query(
          `SELECT wait_event_type FROM pg_stat_activity
           WHERE datname = current_database() AND pid <> pg_backend_pid()`,
        );
        if (rows.some((r) => r.wait_event_type === 'Lock')) break;
        await sleep(25);
      }
      // Now ask for the row the handler's transaction holds: a deadlock, which the completion's
      // check finds, so the completion is the statement aborted.
      const outsideWait = outside.query(
        'SELECT k FROM public.conflict_rows WHERE k = 1 FOR UPDATE',
      );
      await outsideWait;
      await outside.query('COMMIT');
      const run = await client.waitForRun(runId, { timeoutMs: 20_000 });
      expect(run.state).toBe('completed');
      const step = run.steps[0];
      expect(step?.attempt).toBe(2);
      expect(step?.errors.map((e) => e.kind)).toEqual(['conflict']);
      expect(step?.errors[0]?.message).toMatch(/deadlock/);
      expect(attempts).toBe(2);
      const writes = await db.pool.query('SELECT attempt FROM public.conflict_writes');
      expect(writes.rows).toEqual([{ attempt: 2 }]);
    } finally {
      await outside.end().catch(() => {});
      await worker.stop({ graceMs: 2_000 });
    }
  });
});
