/**
 * A claim statement stuck behind a lock (an operator's `LOCK TABLE`, a long migration) when the
 * worker stops: past the grace period, stop() cancels it, so that the statement is gone from the
 * server while the lock is still held and cannot claim steps for a stopped worker once the lock
 * goes away. Run directly and through PgBouncer (vitest.pgbouncer.config.ts), where the process
 * id a connection knows is PgBouncer's own, so only a CancelRequest reaches the server backend.
 */
import {
  engineClientOptions,
  engineUrl,
  engineWorkerOptions,
  testVia,
  waitFor,
} from '@cyclone/testkit';
import type pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { Client, newAction, newWorkflow, Worker } from '../src/index.js';
import { createTestDb, type TestDb } from './support/db.js';

const Noop = newWorkflow('stuck_claim_noop', {
  nodes: { only: { action: newAction('stuck_claim_noop', async () => ({ ok: true })) } },
});

describe(`a claim stuck behind a lock at stop() (${testVia})`, () => {
  let db: TestDb | undefined;
  let client: Client | undefined;
  let locker: pg.PoolClient | undefined;

  afterAll(async () => {
    await locker?.query('ROLLBACK').catch(() => {});
    locker?.release();
    await client?.close();
    await db?.drop();
  });

  /**
   * Backends of this database waiting for a lock for at least `ms` (the claim: the idle worker's
   * read of the next due step gives up after 100 ms). Not by query text: pg_stat_activity keeps
   * its first 1 kB only.
   */
  async function lockWaiters(ms = 0): Promise<number> {
    const { rows } = await (db as TestDb).pool.query(
      `SELECT 1 FROM pg_stat_activity
       WHERE datname = current_database() AND wait_event_type = 'Lock'
         AND now() - query_start >= make_interval(secs => $1::double precision / 1000)`,
      [ms],
    );
    return rows.length;
  }

  it('is cancelled on the server once the grace period is over', async () => {
    db = await createTestDb();
    client = new Client({
      connectionString: engineUrl(db.url),
      poolSize: 2,
      ...engineClientOptions,
    });
    const worker = new Worker({
      client,
      workflows: [Noop],
      pollIntervalMs: 50,
      // Only the claim may wait on the lock: no sweep, no heartbeat statement meanwhile.
      sweepIntervalMs: 1_000_000_000,
      ...engineWorkerOptions,
    });
    await worker.start();
    try {
      locker = await db.pool.connect();
      await locker.query('BEGIN');
      await locker.query('LOCK TABLE cyclone.cyclone_steps IN ACCESS EXCLUSIVE MODE');
      await waitFor('a claim waiting on the lock', async () => (await lockWaiters(500)) > 0);
    } catch (err) {
      await worker.stop({ graceMs: 0 });
      throw err;
    }

    const t0 = Date.now();
    await worker.stop({ graceMs: 300 });
    const stopMs = Date.now() - t0;
    // The lock is still held: only a cancellation ends the claim statement on the server.
    await waitFor('the stuck claim to be cancelled', async () => (await lockWaiters()) === 0, {
      timeoutMs: 5_000,
    });
    expect(stopMs).toBeLessThan(15_000);

    console.log(`stuck claim (${testVia}): stop() took ${stopMs} ms, the claim was cancelled`);
  });
});
