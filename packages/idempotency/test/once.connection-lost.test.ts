/**
 * The connection under once()'s ledger transaction dies while it waits on the ledger row's
 * lock (a backend terminated, a pooler restarted): the step's attempt fails like any lost
 * connection, and the worker process survives. pg emits 'error' on a connection that ends while
 * checked out; with no listener that is an uncaught exception (seen in the soak: a worker process
 * exited when its PgBouncer was SIGKILLed).
 */
import { Client, newAction, newWorkflow, type Worker } from '@cyclone/core';
import { deferred, waitFor } from '@cyclone/testkit';
import type pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { once } from '../src/index.js';
import { createTestDb, type TestDb } from './support/db.js';
import { startWorker, stepErrors } from './support/harness.js';

let db: TestDb;
let client: Client;
let worker: Worker | undefined;
let locker: pg.PoolClient | undefined;

const reached = deferred<string>();
const go = deferred();

const Guarded = newAction(
  'idem_conn_lost',
  async (ctx) => {
    if (ctx.attempt === 1) {
      reached.resolve(ctx.runId);
      await go.promise;
    }
    return once(ctx, { request: { n: 1 } }, async () => ({ done: ctx.attempt }));
  },
  { maxAttempts: 3, backoff: () => 0 },
);
const Flow = newWorkflow('idem_conn_lost', { nodes: { buy: { action: Guarded } } });

beforeAll(async () => {
  db = await createTestDb();
  client = new Client({ connectionString: db.url, poolSize: 6 });
});

afterAll(async () => {
  await locker?.query('ROLLBACK').catch(() => {});
  locker?.release();
  await worker?.stop({ graceMs: 1_000 });
  await client?.close();
  await db?.drop();
});

it('a ledger transaction whose connection dies fails the attempt, not the process', async () => {
  worker = await startWorker(client, [Flow]);
  const { runId } = await client.submit(Flow, {});
  await reached.promise;
  // A ledger row of the key already there and locked elsewhere: once() takes its locked path
  // and waits for the lock.
  await db.pool.query(
    `INSERT INTO cyclone.cyclone_idempotency
       (run_id, key, node, request_hash, phase, owner_attempt)
     VALUES ($1, $2, 'buy', 'x', 'started', 1)`,
    [runId, `${runId}:buy`],
  );
  locker = await db.pool.connect();
  await locker.query('BEGIN');
  await locker.query('SELECT 1 FROM cyclone.cyclone_idempotency WHERE run_id = $1 FOR UPDATE', [
    runId,
  ]);
  go.resolve();
  const waiter = await waitFor('once() waiting on the ledger row', async () => {
    const { rows } = await db.pool.query<{ pid: number }>(
      `SELECT pid FROM pg_stat_activity
       WHERE datname = current_database() AND wait_event_type = 'Lock'
         AND query LIKE '%FOR UPDATE OF l%'`,
    );
    return rows[0]?.pid;
  });
  await db.pool.query('SELECT pg_terminate_backend($1)', [waiter]);

  // The attempt failed on the lost connection and was recorded; the process is still here.
  const errors = await waitFor('the failed attempt to be recorded', async () => {
    const e = await stepErrors(db.pool, runId, 'buy');
    return e.length > 0 ? e : undefined;
  });
  expect(errors[0]).toMatchObject({ attempt: 1 });
  // Gone with its lock: the next attempt makes the call under the key.
  await locker.query('DELETE FROM cyclone.cyclone_idempotency WHERE run_id = $1', [runId]);
  await locker.query('COMMIT');
  locker.release();
  locker = undefined;
  const run = await client.waitForRun(runId, { timeoutMs: 20_000, pollMs: 50 });
  expect(run.steps[0]?.state).toBe('completed');
});
