/**
 * The heartbeat as a service, one beat on a prepared database: a worker's claimed steps get
 * their lease extended; a step taken over by another claim is reported lost, unless its outcome
 * is being recorded (its completion's fence decides); a step whose row another transaction has
 * locked counts as held without being waited for.
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Heartbeat, type HeldStep } from '../src/heartbeat.js';
import { Client, newAction, newWorkflow } from '../src/index.js';
import { claimSteps } from '../src/sql/claim.js';
import { createTestDb, type TestDb } from './support/db.js';
import { captureLogger } from './support/logger.js';

const noop = newAction('hb_ro_noop', async () => null);
const Flow = newWorkflow('hb_ro', { nodes: { step: { action: noop } } });
const OWNER = 'hb-worker';
const CLAIM_LEASE_MS = 10_000;
const BEAT_LEASE_MS = 600_000;

interface Lease {
  state: string;
  attempt: number;
  lease_owner: string | null;
  /** Seconds from now until the lease expires. */
  left: number;
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

/** Submits `n` runs and claims their steps as OWNER; returns them as the worker holds them. */
async function claim(n: number): Promise<(HeldStep & { finishing: boolean })[]> {
  for (let i = 0; i < n; i++) await client.submit(Flow, {});
  const rows = await claimSteps(db.pool, client.db, {
    workflows: [Flow.name],
    limit: n,
    workerId: OWNER,
    leaseMs: CLAIM_LEASE_MS,
    nodeKeys: [`${Flow.name}/step`],
  });
  expect(rows).toHaveLength(n);
  return rows.map((r) => ({ runId: r.run_id, node: r.node, attempt: r.attempt, finishing: false }));
}

async function lease(s: HeldStep): Promise<Lease> {
  const { rows } = await db.pool.query<Lease>(
    `SELECT state, attempt, lease_owner,
            extract(epoch FROM lease_expires_at - now())::float8 AS left
     FROM cyclone.cyclone_steps WHERE run_id = $1 AND node = $2`,
    [s.runId, s.node],
  );
  return rows[0] as Lease;
}

/** Another claim took the step over: the sweep moved it and a second worker claimed it. */
const takeOver = (s: HeldStep) =>
  db.pool.query(
    `UPDATE cyclone.cyclone_steps SET attempt = attempt + 1, lease_owner = 'other-worker'
     WHERE run_id = $1 AND node = $2`,
    [s.runId, s.node],
  );

describe('Heartbeat.runOnce', () => {
  it('extends held leases, reports lost ones, and skips a locked row as held', async () => {
    const [held, lost, lostFinishing, locked] = await claim(4);
    if (!held || !lost || !lostFinishing || !locked) throw new Error('steps not claimed');
    await takeOver(lost);
    await takeOver(lostFinishing);
    lostFinishing.finishing = true;

    // Another transaction holds the row lock of `locked` (as our own completion batch would).
    const locker = new pg.Client({ connectionString: db.url });
    await locker.connect();
    try {
      await locker.query('BEGIN');
      await locker.query(
        'SELECT 1 FROM cyclone.cyclone_steps WHERE run_id = $1 AND node = $2 FOR UPDATE',
        [locked.runId, locked.node],
      );

      const reported: HeldStep[] = [];
      const heartbeat = new Heartbeat(
        {
          pool: db.pool,
          db: client.db,
          log: captureLogger().logger,
          steps: () => [held, lost, lostFinishing, locked],
          leaseLost: (s) => reported.push(s),
        },
        { workerId: OWNER, leaseMs: BEAT_LEASE_MS },
      );
      expect(heartbeat.intervalMs).toBe(BEAT_LEASE_MS / 3);
      const result = await heartbeat.runOnce();

      expect(result).toEqual({ extended: 2, lost: 1 });
      expect(reported).toEqual([lost]);
    } finally {
      await locker.query('ROLLBACK').catch(() => {});
      await locker.end();
    }

    const h = await lease(held);
    expect(h).toMatchObject({ state: 'running', attempt: 1, lease_owner: OWNER });
    expect(h.left).toBeGreaterThan(BEAT_LEASE_MS / 1000 - 60);
    // Held, but not extended: the beat did not wait for the lock.
    const l = await lease(locked);
    expect(l).toMatchObject({ state: 'running', attempt: 1, lease_owner: OWNER });
    expect(l.left).toBeLessThanOrEqual(CLAIM_LEASE_MS / 1000);
    // The other claim's lease is not touched.
    for (const s of [lost, lostFinishing]) {
      const o = await lease(s);
      expect(o).toMatchObject({ state: 'running', attempt: 2, lease_owner: 'other-worker' });
      expect(o.left).toBeLessThanOrEqual(CLAIM_LEASE_MS / 1000);
    }
  });

  it('a step that left running (completed elsewhere, swept) is lost too', async () => {
    const [done] = await claim(1);
    if (!done) throw new Error('step not claimed');
    await db.pool.query(
      `UPDATE cyclone.cyclone_steps SET state = 'retryable', lease_owner = NULL,
         lease_expires_at = NULL WHERE run_id = $1 AND node = $2`,
      [done.runId, done.node],
    );
    const reported: HeldStep[] = [];
    const heartbeat = new Heartbeat(
      {
        pool: db.pool,
        db: client.db,
        log: captureLogger().logger,
        steps: () => [done],
        leaseLost: (s) => reported.push(s),
      },
      { workerId: OWNER, leaseMs: BEAT_LEASE_MS },
    );
    expect(await heartbeat.runOnce()).toEqual({ extended: 0, lost: 1 });
    expect(reported).toEqual([done]);
    expect(await lease(done)).toMatchObject({ state: 'retryable', lease_owner: null });
  });

  it('with no steps in flight sends nothing', async () => {
    const pool = new pg.Pool({ connectionString: db.url, max: 1 });
    try {
      const heartbeat = new Heartbeat(
        {
          pool,
          db: client.db,
          log: captureLogger().logger,
          steps: () => [],
          leaseLost: () => {
            throw new Error('nothing to lose');
          },
        },
        { workerId: OWNER },
      );
      expect(await heartbeat.runOnce()).toEqual({ extended: 0, lost: 0 });
      expect(pool.totalCount).toBe(0);
    } finally {
      await pool.end();
    }
  });
});
