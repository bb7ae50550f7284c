/**
 * The operator UI's reads of the ledger: a run's rows (all, or one node's, whose keys may carry a
 * scope), the unknown outcomes oldest first in keyset pages, their capped count, the go-to box's
 * key lookup; bodies as JSON text (a number beyond 2^53 intact) cut to the preview; and, in a
 * schema without the ledger, empty answers instead of errors.
 */
import { Client, newAction, newWorkflow } from '@cyclone/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  countUnknownOutcomes,
  findIdempotencyKey,
  readLedgerOfRun,
  readUnknownOutcomes,
} from '../src/index.js';
import { createTestDb, type TestDb } from './support/db.js';

const noop = newAction('uil_noop', async () => null);
const Flow = newWorkflow('uil_flow', {
  nodes: { charge: { action: noop }, mail: { action: noop, after: ['charge'] } },
});

let db: TestDb;
let client: Client;
let runA: string;
let runB: string;

/** Inserts a ledger row of `runId` for `node` (key `${runId}:${node}[:scope]`). */
async function row(
  runId: string,
  node: string,
  phase: string,
  o: { scope?: string; result?: string; ageMs?: number } = {},
) {
  const key = `${runId}:${node}${o.scope ? `:${o.scope}` : ''}`;
  await db.pool.query(
    `INSERT INTO cyclone.cyclone_idempotency (run_id, key, node, scope, provider, operation,
       request_hash, phase, owner_attempt, result, created_at, updated_at)
     VALUES ($1, $2, $3, $4, 'stripe', 'charge', 'h', $5, 1, $6::jsonb,
             now() - $7 * interval '1 ms', now() - $7 * interval '1 ms')`,
    [runId, key, node, o.scope ?? null, phase, o.result ?? null, o.ageMs ?? 0],
  );
  return key;
}

beforeAll(async () => {
  db = await createTestDb();
  client = new Client({ connectionString: db.url, poolSize: 2 });
  runA = (await client.submit(Flow, {})).runId;
  runB = (await client.submit(Flow, {})).runId;
  await row(runA, 'charge', 'succeeded', { result: '{"id":"pi_1","amount":12345678901234567890}' });
  await row(runA, 'charge', 'unknown', { scope: 'refund', ageMs: 60_000 });
  await row(runA, 'mail', 'unknown', { ageMs: 30_000 });
  await row(runB, 'charge', 'unknown', { ageMs: 10_000 });
  await row(runB, 'mail', 'started');
});

afterAll(async () => {
  await client?.close();
  await db?.drop();
});

describe('ledger reads for the UI', () => {
  it("reads a run's rows, or one node's, with bodies as JSON text", async () => {
    const all = await readLedgerOfRun(db.pool, client.db.q, runA);
    expect(all.map((r) => [r.node, r.scope, r.phase])).toEqual([
      ['charge', null, 'succeeded'],
      ['charge', 'refund', 'unknown'],
      ['mail', null, 'unknown'],
    ]);
    expect(all[0]?.result).toContain('12345678901234567890');
    expect(all[0]?.resultBytes).toBe(Buffer.byteLength(all[0]?.result ?? ''));
    expect(all[0]?.createdAt).toMatch(/Z$/);
    const charge = await readLedgerOfRun(db.pool, client.db.q, runA, 'charge', {
      previewChars: 8,
    });
    expect(charge).toHaveLength(2);
    expect(charge[0]?.result).toHaveLength(8);
    expect(await readLedgerOfRun(db.pool, client.db.q, 'not-a-run')).toEqual([]);
  });

  it('pages the unknown outcomes oldest first, older than asked, and counts them', async () => {
    const first = await readUnknownOutcomes(db.pool, client.db.q, { limit: 2 });
    expect(first.items.map((r) => [r.runId, r.node, r.scope])).toEqual([
      [runA, 'charge', 'refund'],
      [runA, 'mail', null],
    ]);
    expect(first.next).not.toBeNull();
    const second = await readUnknownOutcomes(db.pool, client.db.q, {
      limit: 2,
      cursor: first.next as string,
    });
    expect(second.items.map((r) => [r.runId, r.node])).toEqual([[runB, 'charge']]);
    expect(second.next).toBeNull();
    const old = await readUnknownOutcomes(db.pool, client.db.q, { olderThanMs: 20_000 });
    expect(old.items).toHaveLength(2);
    expect(await countUnknownOutcomes(db.pool, client.db.q)).toEqual({ count: 3, capped: false });
    expect(await countUnknownOutcomes(db.pool, client.db.q, 2)).toEqual({ count: 2, capped: true });
    await expect(readUnknownOutcomes(db.pool, client.db.q, { cursor: 'bogus' })).rejects.toThrow(
      RangeError,
    );
    await expect(readUnknownOutcomes(db.pool, client.db.q, { limit: 0 })).rejects.toThrow(
      RangeError,
    );
  });

  it('finds the run and node of an idempotency key', async () => {
    const key = `${runA}:charge:refund`;
    expect(await findIdempotencyKey(db.pool, client.db.q, key)).toEqual({
      kind: 'idempotencyKey',
      runId: runA,
      node: 'charge',
    });
    expect(await findIdempotencyKey(db.pool, client.db.q, `${runA}:nope`)).toBeNull();
    expect(await findIdempotencyKey(db.pool, client.db.q, 'order-42')).toBeNull();
  });

  it('answers as for an empty ledger where the ledger is not installed', async () => {
    const other = new Client({ connectionString: db.url, schema: 'uil_bare', poolSize: 1 });
    try {
      await other.migrate();
      const q = other.db.q;
      expect(await readLedgerOfRun(db.pool, q, runA)).toEqual([]);
      expect(await readUnknownOutcomes(db.pool, q)).toEqual({ items: [], next: null });
      expect(await countUnknownOutcomes(db.pool, q)).toBeNull();
      expect(await findIdempotencyKey(db.pool, q, `${runA}:charge`)).toBeNull();
    } finally {
      await other.close();
    }
  });
});
