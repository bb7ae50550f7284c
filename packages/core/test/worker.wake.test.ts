/**
 * No lost wake-up: a NOTIFY that arrives while the claim loop is inside a claim statement makes
 * the loop claim again as soon as that statement returns, even when the loop's previous wait
 * ended by its timer (a poll interval or a back-off after a failed claim) rather than by a wake.
 * Otherwise the new work waits a full poll interval.
 *
 * A trigger on the claim's UPDATE makes the moments precise: while `claim_fault.fail` is set,
 * claims of this workflow fail (the loop backs off on a timer); then a claim holds inside the
 * statement, after its snapshot, until the test releases an advisory lock. A run submitted in
 * that window is invisible to that claim; only its NOTIFY can bring it in.
 */
import { type Deferred, deferred, waitFor } from '@cyclone/testkit';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, newAction, newWorkflow, Worker } from '../src/index.js';
import { createTestDb, type TestDb } from './support/db.js';

const LOCK_KEY = 4242;

const release = new Map<string, Deferred>();
const gate = (runId: string) => {
  let d = release.get(runId);
  if (!d) {
    d = deferred();
    release.set(runId, d);
  }
  return d;
};
// Held by the test: no step finishing frees a slot (which would wake the loop too).
const held = newAction('wake_held', async (ctx) => {
  await gate(ctx.runId).promise;
  return null;
});
const WakeProbe = newWorkflow('wake_probe', { nodes: { only: { action: held } } });

describe('a wake-up during a claim statement', () => {
  let db: TestDb;
  let client: Client;
  let worker: Worker | undefined;
  const admins: pg.Client[] = [];

  beforeAll(async () => {
    db = await createTestDb();
    await db.pool.query(`
      CREATE TABLE claim_fault (fail boolean NOT NULL);
      INSERT INTO claim_fault VALUES (true);
      CREATE SEQUENCE claim_failures;
      CREATE FUNCTION claim_hook() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF (SELECT fail FROM claim_fault) THEN
          PERFORM nextval('claim_failures');
          RAISE EXCEPTION 'injected claim failure';
        END IF;
        -- Waits here, inside the claim statement, while the test holds the lock.
        PERFORM pg_advisory_xact_lock_shared(${LOCK_KEY});
        RETURN NEW;
      END $$;
      CREATE TRIGGER claim_hook BEFORE UPDATE ON cyclone.cyclone_steps FOR EACH ROW
        WHEN (OLD.state <> 'running' AND NEW.state = 'running' AND NEW.workflow = 'wake_probe')
        EXECUTE FUNCTION claim_hook();
    `);
    client = new Client({ connectionString: db.url, poolSize: 4 });
  });

  afterAll(async () => {
    for (const d of release.values()) d.resolve();
    for (const a of admins) await a.end().catch(() => {});
    await worker?.stop({ graceMs: 1_000 });
    await client?.close();
    await db?.drop();
  });

  async function connect(): Promise<pg.Client> {
    const c = new pg.Client({ connectionString: db.url });
    c.on('error', () => {});
    await c.connect();
    admins.push(c);
    return c;
  }

  async function stepState(runId: string): Promise<string> {
    const { rows } = await db.pool.query<{ state: string }>(
      'SELECT state FROM cyclone.cyclone_steps WHERE run_id = $1',
      [runId],
    );
    return rows[0]?.state ?? 'missing';
  }

  it('a run submitted while the claim statement runs is claimed right after it, not a poll interval later', async () => {
    const locker = await connect();
    await locker.query('SELECT pg_advisory_lock($1)', [LOCK_KEY]);
    const { rows: lockerRows } = await locker.query<{ pid: number }>(
      'SELECT pg_backend_pid() AS pid',
    );
    const lockerPid = lockerRows[0]?.pid;
    // The test's own LISTEN, to know when the NOTIFY of run B has been delivered.
    const listener = await connect();
    const notified: string[] = [];
    listener.on('notification', (m) => notified.push(m.payload ?? ''));
    await listener.query('LISTEN cyclone_cyclone');

    // A poll interval far beyond the test's deadlines: only wake-ups bring work in.
    worker = new Worker({
      client,
      workflows: [WakeProbe],
      concurrency: 4,
      pollIntervalMs: 60_000,
      sweepIntervalMs: 60_000,
    });
    await worker.start();

    // Run A: the loop's claims fail (it backs off on its timer, 200 ms, 400 ms…).
    const { runId: a } = await client.submit(WakeProbe, {});
    await waitFor('two failed claims', async () => {
      const { rows } = await db.pool.query<{ n: string }>(
        'SELECT last_value AS n FROM claim_failures',
      );
      return Number(rows[0]?.n) >= 2;
    });
    // The next claim, after a back-off that ended by its timer, takes A and holds.
    await db.pool.query('UPDATE claim_fault SET fail = false');
    await waitFor('the claim statement to hold on the advisory lock', async () => {
      const { rows } = await db.pool.query(
        `SELECT 1 FROM pg_stat_activity
         WHERE datname = current_database() AND wait_event_type = 'Lock' AND wait_event = 'advisory'
           AND pid <> $1`,
        [lockerPid],
      );
      return rows.length > 0;
    });

    // Run B arrives while that claim runs: its snapshot does not have B.
    const before = notified.length;
    const { runId: b } = await client.submit(WakeProbe, {});
    await waitFor('the NOTIFY of run B', () => notified.length > before);
    await new Promise((r) => setImmediate(r));
    await locker.query('SELECT pg_advisory_unlock($1)', [LOCK_KEY]);

    await waitFor('run A to be claimed', async () => (await stepState(a)) === 'running');
    // A is held, so no freed slot wakes the loop: only B's NOTIFY can.
    const claimed = await waitFor(
      'run B to be claimed through its NOTIFY',
      async () => {
        const s = await stepState(b);
        if (s !== 'running') throw new Error(`B is ${s}`);
        return s;
      },
      { timeoutMs: 5_000 },
    );
    expect(claimed).toBe('running');

    gate(a).resolve();
    gate(b).resolve();
    for (const runId of [a, b]) {
      expect((await client.waitForRun(runId, { timeoutMs: 10_000 })).state).toBe('completed');
    }
  });
});
