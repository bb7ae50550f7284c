/**
 * `submitOnce`: at most one run per (workflow, key), under concurrency too; a different input
 * under the same key is an error, never a silent success; invalid input writes nothing; keys of
 * any reasonable text work.
 */
import { engineClientOptions, engineUrl } from '@cyclone/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  Client,
  InputValidationError,
  newAction,
  newWorkflow,
  SubmitKeyConflictError,
} from '../src/index.js';
import { createTestDb, type TestDb } from './support/db.js';

const noop = newAction('noop', async () => null);
const amountAction = newAction('charge', async () => null, {
  input: z.object({ amount: z.number().int().positive() }),
});
const Order = newWorkflow('order', {
  input: z.object({
    orderId: z.string().min(1),
    amount: z.number().int(),
    tags: z.array(z.string()).optional(),
  }),
  nodes: {
    charge: { action: amountAction, input: (run) => ({ amount: run.amount }) },
    ship: { action: noop, after: ['charge'] },
  },
});
const Other = newWorkflow('other', { nodes: { only: { action: noop } } });

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

describe('submitOnce', () => {
  let db: TestDb;
  let client: Client;

  beforeAll(async () => {
    db = await createTestDb();
    client = new Client({
      connectionString: engineUrl(db.url),
      poolSize: 20,
      ...engineClientOptions,
    });
  });

  afterAll(async () => {
    await client?.close();
    await db?.drop();
  });

  async function counts() {
    const { rows } = await db.pool.query<{ runs: number; steps: number }>(
      `SELECT (SELECT count(*)::int FROM cyclone.cyclone_runs) AS runs,
              (SELECT count(*)::int FROM cyclone.cyclone_steps) AS steps`,
    );
    return rows[0];
  }

  it('50 concurrent calls with one key: one run, created exactly once, never a missing run', async () => {
    for (let round = 0; round < 3; round++) {
      const key = `order-concurrent-${round}`;
      const input = { orderId: `o-${round}`, amount: 10 + round };
      const results = await Promise.all(
        Array.from({ length: 50 }, () => client.submitOnce(Order, key, input)),
      );
      for (const r of results) {
        expect(r.runId).toMatch(UUID);
        expect(typeof r.created).toBe('boolean');
      }
      expect(new Set(results.map((r) => r.runId)).size).toBe(1);
      expect(results.filter((r) => r.created)).toHaveLength(1);
      const runId = results[0]?.runId as string;
      const { rows } = await db.pool.query<{ id: string }>(
        'SELECT id FROM cyclone.cyclone_runs WHERE workflow = $1 AND submit_key = $2',
        [Order.name, key],
      );
      expect(rows).toEqual([{ id: runId }]);
      const run = await client.getRun(runId);
      expect(run.submitKey).toBe(key);
      expect(run.steps.map((s) => s.node).sort()).toEqual(['charge', 'ship']);
      expect(run.input).toEqual(input);
    }
  });

  it('the same key again returns the run with created false; the same data in another key order too', async () => {
    const first = await client.submitOnce(Order, 'order-again', {
      orderId: 'x',
      amount: 5,
      tags: ['a'],
    });
    expect(first.created).toBe(true);
    const second = await Order.submitOnce(client, 'order-again', {
      tags: ['a'],
      amount: 5,
      orderId: 'x',
    });
    expect(second).toEqual({ runId: first.runId, created: false });
  });

  it('an input that differs only by undefined properties is the same input (as JSON stores it)', async () => {
    const first = await client.submitOnce(Order, 'order-undefined', { orderId: 'u', amount: 2 });
    const second = await client.submitOnce(Order, 'order-undefined', {
      orderId: 'u',
      amount: 2,
      tags: undefined,
    });
    expect(second).toEqual({ runId: first.runId, created: false });
  });

  it('the same key with a different input is a SubmitKeyConflictError', async () => {
    const before = await counts();
    const first = await client.submitOnce(Order, 'order-conflict', { orderId: 'c', amount: 1 });
    const err = await client
      .submitOnce(Order, 'order-conflict', { orderId: 'c', amount: 2 })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SubmitKeyConflictError);
    const e = err as SubmitKeyConflictError;
    expect(e.code).toBe('SUBMIT_KEY_CONFLICT');
    expect(e.runId).toBe(first.runId);
    expect(e.key).toBe('order-conflict');
    expect(e.workflow).toBe('order');
    // Array order is data: a reordered array is a different input.
    await client.submitOnce(Order, 'order-arrays', { orderId: 'c', amount: 1, tags: ['a', 'b'] });
    await expect(
      client.submitOnce(Order, 'order-arrays', { orderId: 'c', amount: 1, tags: ['b', 'a'] }),
    ).rejects.toBeInstanceOf(SubmitKeyConflictError);
    const after = await counts();
    expect(after?.runs).toBe((before?.runs ?? 0) + 2);
  });

  it('concurrent calls with one key and different inputs: one run, the others conflict', async () => {
    const results = await Promise.allSettled(
      Array.from({ length: 20 }, (_, i) =>
        client.submitOnce(Order, 'order-race-conflict', { orderId: 'r', amount: i + 1 }),
      ),
    );
    const ok = results.filter((r) => r.status === 'fulfilled');
    const bad = results.filter((r) => r.status === 'rejected');
    expect(ok).toHaveLength(1);
    expect(bad).toHaveLength(19);
    for (const b of bad)
      expect((b as PromiseRejectedResult).reason).toBeInstanceOf(SubmitKeyConflictError);
    const { rows } = await db.pool.query(
      `SELECT 1 FROM cyclone.cyclone_runs WHERE submit_key = 'order-race-conflict'`,
    );
    expect(rows).toHaveLength(1);
  });

  it('a key is per workflow: another workflow with the same key gets its own run', async () => {
    const a = await client.submitOnce(Order, 'shared-key', { orderId: 's', amount: 1 });
    const b = await client.submitOnce(Other, 'shared-key', { orderId: 's', amount: 1 });
    expect(a.created).toBe(true);
    expect(b.created).toBe(true);
    expect(a.runId).not.toBe(b.runId);
  });

  it('input failing the workflow schema: InputValidationError with issues, nothing written', async () => {
    const before = await counts();
    const err = await client
      .submitOnce(Order, 'bad-input', { orderId: '', amount: 1.5 } as never)
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InputValidationError);
    const e = err as InputValidationError;
    expect(e.code).toBe('INPUT_VALIDATION');
    expect(e.workflow).toBe('order');
    const paths = e.issues.map((i) => i.path.join('.')).sort();
    expect(paths).toEqual(['amount', 'orderId']);
    for (const i of e.issues) expect(i.message.length).toBeGreaterThan(0);
    expect(await counts()).toEqual(before);
    // The key stays free: a valid submission under it creates the run.
    const ok = await client.submitOnce(Order, 'bad-input', { orderId: 'fine', amount: 3 });
    expect(ok.created).toBe(true);
  });

  it("input failing a root node's action schema: InputValidationError naming the node, nothing written", async () => {
    const before = await counts();
    const err = await client
      .submitOnce(Order, 'bad-amount', { orderId: 'n', amount: -4 })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InputValidationError);
    expect((err as InputValidationError).node).toBe('charge');
    expect((err as InputValidationError).issues[0]?.path).toEqual(['amount']);
    expect(await counts()).toEqual(before);
  });

  it('keys of 1,000 characters and Unicode keys work, and stay distinct', async () => {
    const keys = [
      'k'.repeat(1000),
      `${'k'.repeat(999)}l`,
      '🌀🚀 order #42',
      '注文-四十二',
      '주문-42',
      'ключ',
      'café', // composed é
      'cafe\u0301', // decomposed é: a different string, a different key
      'A',
      'a',
      ' ',
      "'; DROP TABLE cyclone.cyclone_runs; --",
      '🌀'.repeat(1000), // 1,000 characters of 4 bytes each
    ];
    const runIds = new Set<string>();
    for (const key of keys) {
      const input = { orderId: 'u', amount: 7 };
      const first = await client.submitOnce(Order, key, input);
      const again = await client.submitOnce(Order, key, input);
      expect(first.created, key).toBe(true);
      expect(again, key).toEqual({ runId: first.runId, created: false });
      expect((await client.getRun(first.runId)).submitKey).toBe(key);
      runIds.add(first.runId);
    }
    expect(runIds.size).toBe(keys.length);
  });

  it('bad keys (NUL, empty) are InputValidationErrors and write nothing', async () => {
    const before = await counts();
    for (const key of ['a\u0000b', '\u0000', '']) {
      const err = await client
        .submitOnce(Order, key, { orderId: 'k', amount: 1 })
        .catch((e: unknown) => e);
      expect(err, JSON.stringify(key)).toBeInstanceOf(InputValidationError);
      expect((err as InputValidationError).issues[0]?.path).toEqual(['key']);
    }
    expect(await counts()).toEqual(before);
  });
});
