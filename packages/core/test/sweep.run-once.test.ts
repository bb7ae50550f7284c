/**
 * The recovery sweep as a service, run once on a prepared database: steps claimed by a worker
 * that is gone (their lease made to expire with an UPDATE) are moved back to `retryable`, or to
 * `discarded` when their attempts are used up (failing the run); a live lease is left alone.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, newAction, newWorkflow } from '../src/index.js';
import { claimSteps } from '../src/sql/claim.js';
import type { SweptStep } from '../src/sql/sweep.js';
import { Sweep } from '../src/sweep.js';
import { createTestDb, type TestDb } from './support/db.js';
import { captureLogger } from './support/logger.js';

const noop = newAction('sweep_ro_noop', async () => null);
/** A one-node workflow; each test has its own, so that one test's claims never take another's. */
const flow = (name: string, maxAttempts?: number) =>
  newWorkflow(name, { nodes: { step: { action: noop, maxAttempts } } });
const DEAD = 'dead-worker';

interface Row {
  run_id: string;
  state: string;
  attempt: number;
  lease_owner: string | null;
  lease_expires_at: Date | null;
  errors: { attempt: number; kind: string; message: string }[];
}

let db: TestDb;
let client: Client;

beforeAll(async () => {
  db = await createTestDb();
  client = new Client({ connectionString: db.url, poolSize: 2 });
});

afterAll(async () => {
  await client?.close();
  await db?.drop();
});

/** Submits runs of `wf`, claims their steps as DEAD, and returns the run ids. */
async function claimedRuns(wf: ReturnType<typeof flow>, n: number): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < n; i++) ids.push((await client.submit(wf, {})).runId);
  const rows = await claimSteps(db.pool, client.db, {
    workflows: [wf.name],
    limit: n,
    workerId: DEAD,
    leaseMs: 60_000,
    nodeKeys: [`${wf.name}/step`],
  });
  expect(rows.map((r) => r.run_id).sort()).toEqual([...ids].sort());
  return ids;
}

const expire = (runIds: string[]) =>
  db.pool.query(
    `UPDATE cyclone.cyclone_steps SET lease_expires_at = now() - interval '1 second'
     WHERE run_id = ANY($1::uuid[])`,
    [runIds],
  );

async function step(runId: string): Promise<Row> {
  const { rows } = await db.pool.query<Row>(
    `SELECT run_id, state, attempt, lease_owner, lease_expires_at, errors
     FROM cyclone.cyclone_steps WHERE run_id = $1 AND node = 'step'`,
    [runId],
  );
  return rows[0] as Row;
}

describe('Sweep.runOnce', () => {
  it('moves expired leases in batches, discards exhausted steps, and leaves live leases', async () => {
    const Flow = flow('sweep_ro_batches');
    const retried = await claimedRuns(Flow, 3);
    const [exhausted] = await claimedRuns(flow('sweep_ro_exhausted', 1), 1);
    const [live] = await claimedRuns(Flow, 1);
    if (!exhausted || !live) throw new Error('runs not claimed');
    await expire([...retried, exhausted]);

    const { logger, entries } = captureLogger();
    const batches: SweptStep[][] = [];
    const sweep = new Sweep(
      { pool: db.pool, db: client.db, log: logger, swept: (s) => batches.push([...s]) },
      { batchSize: 3 },
    );
    const result = await sweep.runOnce();

    expect(result).toEqual({ swept: 4, discarded: 1 });
    // A full batch of 3 is followed by another statement, which finds the last one.
    expect(batches.map((b) => b.length)).toEqual([3, 1]);
    for (const id of retried) {
      const row = await step(id);
      expect(row).toMatchObject({ state: 'retryable', attempt: 1, lease_owner: null });
      expect(row.lease_expires_at).toBeNull();
      expect(row.errors).toHaveLength(1);
      expect(row.errors[0]).toMatchObject({ attempt: 1, kind: 'lease_expired' });
      expect(row.errors[0]?.message).toContain(DEAD);
    }
    expect(await step(exhausted)).toMatchObject({ state: 'discarded', lease_owner: null });
    const run = await db.pool.query(
      'SELECT state, steps_active, completed_at FROM cyclone.cyclone_runs WHERE id = $1',
      [exhausted],
    );
    expect(run.rows[0]).toMatchObject({ state: 'failed', steps_active: 0 });
    expect(run.rows[0].completed_at).not.toBeNull();
    expect(await step(live)).toMatchObject({ state: 'running', lease_owner: DEAD });

    const recovered = entries.filter((e) => e.msg === 'lease expired: step recovered by the sweep');
    expect(recovered).toHaveLength(4);
    expect(recovered.every((e) => e.level === 'warn')).toBe(true);
    expect(recovered.map((e) => e.data.runId).sort()).toEqual([...retried, exhausted].sort());

    // Nothing left to sweep: a second run moves nothing.
    expect(await sweep.runOnce()).toEqual({ swept: 0, discarded: 0 });
    expect(batches).toHaveLength(3);
  });

  it('the moved steps are claimable again at once', async () => {
    const Flow = flow('sweep_ro_reclaim');
    const [id] = await claimedRuns(Flow, 1);
    if (!id) throw new Error('run not claimed');
    await expire([id]);
    const sweep = new Sweep({ pool: db.pool, db: client.db, log: captureLogger().logger });
    expect(await sweep.runOnce()).toEqual({ swept: 1, discarded: 0 });
    const again = await claimSteps(db.pool, client.db, {
      workflows: [Flow.name],
      limit: 10,
      workerId: 'rescuer',
      leaseMs: 60_000,
      nodeKeys: [`${Flow.name}/step`],
    });
    expect(again.map((r) => [r.run_id, r.attempt])).toEqual([[id, 2]]);
    expect(await step(id)).toMatchObject({ state: 'running', attempt: 2, lease_owner: 'rescuer' });
  });

  it('once stopped, sends no further statement', async () => {
    const [id] = await claimedRuns(flow('sweep_ro_stopped'), 1);
    if (!id) throw new Error('run not claimed');
    await expire([id]);
    const sweep = new Sweep({ pool: db.pool, db: client.db, log: captureLogger().logger });
    sweep.stop();
    expect(await sweep.runOnce()).toEqual({ swept: 0, discarded: 0 });
    expect(await step(id)).toMatchObject({ state: 'running', lease_owner: DEAD });
  });
});
