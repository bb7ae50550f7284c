/**
 * `submitOnce(…, { tx })` inside the caller's REPEATABLE READ or SERIALIZABLE transaction that
 * loses the race for its key to another submitter: a `TransactionConflictError` (stable code,
 * SQLSTATE, a message that says to retry the transaction) instead of PostgreSQL's raw
 * serialization failure; the retried transaction finds the winner's run.
 */
import { engineClientOptions, engineUrl } from '@cyclone/testkit';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  Client,
  CycloneError,
  newAction,
  newWorkflow,
  TransactionConflictError,
} from '../src/index.js';
import { createTestDb, type TestDb } from './support/db.js';

const Order = newWorkflow<{ orderId: string }>('ser_order', {
  nodes: { charge: { action: newAction('ser_charge', () => null) } },
});

let db: TestDb;
let client: Client;

beforeAll(async () => {
  db = await createTestDb();
  client = new Client({ connectionString: engineUrl(db.url), poolSize: 4, ...engineClientOptions });
});

afterAll(async () => {
  await client?.close();
  await db?.drop();
});

/** Runs `fn` on a connection of its own, released after. */
async function onConnection<T>(fn: (c: pg.PoolClient) => Promise<T>): Promise<T> {
  const c = await client.pool.connect();
  try {
    return await fn(c);
  } finally {
    c.release();
  }
}

describe.each(['REPEATABLE READ', 'SERIALIZABLE'])('in a %s transaction', (level) => {
  it('a key committed by another submitter after the snapshot: TransactionConflictError, then the retry finds its run', async () => {
    const key = `k-${level}-committed`;
    const input = { orderId: key };
    await onConnection(async (c) => {
      await c.query(`BEGIN ISOLATION LEVEL ${level}`);
      await c.query('SELECT 1'); // the snapshot is taken
      const winner = await client.submitOnce(Order, key, input);
      expect(winner.created).toBe(true);

      const err = await client.submitOnce(Order, key, input, { tx: c }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(TransactionConflictError);
      expect(TransactionConflictError.isInstance(err)).toBe(true);
      expect(err).toBeInstanceOf(CycloneError);
      expect(err).toMatchObject({
        code: 'TRANSACTION_CONFLICT',
        workflow: 'ser_order',
        key,
        sqlState: '40001',
      });
      expect((err as Error).message).toMatch(/roll it back and retry the transaction$/);
      expect((err as Error & { cause: { code: string } }).cause.code).toBe('40001');
      await c.query('ROLLBACK');

      // The retry, as the message says: the winner's run, not a second one.
      await c.query(`BEGIN ISOLATION LEVEL ${level}`);
      const again = await client.submitOnce(Order, key, input, { tx: c });
      await c.query('COMMIT');
      expect(again).toEqual({ runId: winner.runId, created: false });
    });
  });

  it('a key being inserted by a transaction that commits while we wait on it: the same', async () => {
    const key = `k-${level}-waiting`;
    const input = { orderId: key };
    const other = await client.pool.connect();
    try {
      await onConnection(async (c) => {
        await c.query(`BEGIN ISOLATION LEVEL ${level}`);
        await c.query('SELECT 1');
        await other.query('BEGIN');
        const winner = await client.submitOnce(Order, key, input, { tx: other });
        const ours = client.submitOnce(Order, key, input, { tx: c }).catch((e: unknown) => e);
        // Ours waits on the other transaction's uncommitted key, then loses when it commits.
        await new Promise((r) => setTimeout(r, 200));
        await other.query('COMMIT');
        const err = await ours;
        expect(err).toBeInstanceOf(TransactionConflictError);
        expect(err).toMatchObject({ code: 'TRANSACTION_CONFLICT', sqlState: '40001' });
        await c.query('ROLLBACK');
        expect(winner.created).toBe(true);
      });
    } finally {
      other.release();
    }
  });
});

it('under READ COMMITTED (the default) the same race needs no retry: the other run is found', async () => {
  const key = 'k-read-committed';
  const input = { orderId: key };
  await onConnection(async (c) => {
    await c.query('BEGIN');
    await c.query('SELECT 1');
    const winner = await client.submitOnce(Order, key, input);
    const ours = await client.submitOnce(Order, key, input, { tx: c });
    await c.query('COMMIT');
    expect(ours).toEqual({ runId: winner.runId, created: false });
  });
});
