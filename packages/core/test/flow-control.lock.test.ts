/**
 * The limited claim's transaction when the action's advisory lock cannot be had: the statement
 * that waits for the lock is cancelled (as stop() cancels a claim in flight, or a
 * statement_timeout would). The claim's transaction must be rolled back before its connection
 * goes back to the control pool; else that connection sits in an aborted transaction and every
 * later statement on it (claims, heartbeats) fails with "current transaction is aborted".
 */
import pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { Client, newAction, newWorkflow, Worker } from '../src/index.js';
import { actionLockKey } from '../src/sql/flow.js';
import { createTestDb, type TestDb } from './support/db.js';
import { captureLogger } from './support/logger.js';

let db: TestDb;
let client: Client;
let pool: pg.Pool;

beforeAll(async () => {
  db = await createTestDb();
  client = new Client({ connectionString: db.url, poolSize: 4 });
  pool = new pg.Pool({ connectionString: db.url, max: 3 });
}, 60_000);

afterAll(async () => {
  await pool?.end();
  await client?.close();
  await db?.drop();
});

const Limited = newWorkflow('fcl_limited', {
  nodes: {
    only: { action: newAction('fcl_limited', async () => ({}), { concurrency: { limit: 2 } }) },
  },
});
const Plain = newWorkflow('fcl_plain', {
  nodes: { only: { action: newAction('fcl_plain', async () => ({})) } },
});

async function waitFor<T>(what: string, f: () => Promise<T | undefined>, ms = 30_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await f();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

it('a limited claim cancelled while it waits for the action lock leaves no aborted transaction behind', async () => {
  const cap = captureLogger();
  const worker = new Worker({
    client,
    workflows: [Limited, Plain],
    concurrency: 4,
    pollIntervalMs: 100,
    logger: cap.logger,
  });
  const holder = await pool.connect();
  try {
    await worker.start();
    // Another session holds the action's lock, as a worker stalled inside its claim would.
    await holder.query('BEGIN');
    await holder.query('SELECT pg_advisory_xact_lock($1::bigint)', [
      actionLockKey(`cyclone.flow:${client.db.q}:fcl_limited`).toString(),
    ]);
    await client.submit(Limited, {});
    const waiter = await waitFor('the worker waiting for the action lock', async () => {
      const { rows } = await pool.query<{ pid: number }>(
        `SELECT pid FROM pg_stat_activity
         WHERE datname = current_database() AND wait_event_type = 'Lock' AND wait_event = 'advisory'`,
      );
      return rows[0]?.pid;
    });
    await pool.query('SELECT pg_cancel_backend($1)', [waiter]);
    await holder.query('COMMIT');

    // The worker goes on: plain and limited runs complete.
    const ids = [
      await client.submit(Plain, {}),
      await client.submit(Limited, {}),
      await client.submit(Plain, {}),
    ];
    await waitFor('every run completed', async () => {
      const { rows } = await pool.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM cyclone.cyclone_runs WHERE state = 'completed'`,
      );
      return rows[0]?.n === ids.length + 1 ? true : undefined;
    });
    // Give the control pool's connections time to be used again (claims, heartbeats, sweeps).
    await new Promise((r) => setTimeout(r, 1_500));
    const { rows: aborted } = await pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM pg_stat_activity
       WHERE datname = current_database() AND state = 'idle in transaction (aborted)'`,
    );
    expect(aborted[0]?.n).toBe(0);
    expect(cap.text()).not.toMatch(/current transaction is aborted/);
  } finally {
    holder.release();
    await worker.stop({ graceMs: 2_000 });
  }
}, 90_000);

it('a session holding an action lock holds up neither the plain claim nor the other work', async () => {
  const worker = new Worker({
    client,
    workflows: [Limited, Plain],
    concurrency: 4,
    pollIntervalMs: 100,
  });
  const holder = await pool.connect();
  try {
    await worker.start();
    await holder.query('BEGIN');
    await holder.query('SELECT pg_advisory_xact_lock($1::bigint)', [
      actionLockKey(`cyclone.flow:${client.db.q}:fcl_limited`).toString(),
    ]);
    const limited = await client.submit(Limited, {});
    const plain = await Promise.all(Array.from({ length: 10 }, () => client.submit(Plain, {})));
    // Every plain run completes while the lock is still held (it is held until the end of this).
    for (const { runId } of plain) {
      expect((await client.waitForRun(runId, { timeoutMs: 20_000, pollMs: 50 })).state).toBe(
        'completed',
      );
    }
    expect((await client.getRun(limited.runId)).state).toBe('running');
    await holder.query('COMMIT');
    expect((await client.waitForRun(limited.runId, { timeoutMs: 20_000, pollMs: 50 })).state).toBe(
      'completed',
    );
  } finally {
    await holder.query('ROLLBACK').catch(() => {});
    holder.release();
    await worker.stop({ graceMs: 2_000 });
  }
}, 90_000);
