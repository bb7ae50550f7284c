/**
 * `submitOnce` with an input holding a sparse array: the hole is stored as null (JSON), so the
 * same input, or the same data written with null, is the same input under its key, not a
 * conflict.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, newAction, newWorkflow } from '../src/index.js';
import { hashJson, toJson } from '../src/json.js';
import { createTestDb, type TestDb } from './support/db.js';

const noop = newAction('sparse_noop', async () => null);
const W = newWorkflow('sparse_input', { nodes: { only: { action: noop } } });

describe('submitOnce with a sparse array in the input', () => {
  let db: TestDb;
  let client: Client;

  beforeAll(async () => {
    db = await createTestDb();
    client = new Client({ connectionString: db.url });
  });
  afterAll(async () => {
    await client?.close();
    await db?.drop();
  });

  it('hashes a hole as the null the stored text has', () => {
    // biome-ignore lint/suspicious/noSparseArray: the sparse array is the case under test
    const sparse = toJson({ a: [1, , 3] });
    expect(sparse).toEqual({ a: [1, null, 3] });
    expect(hashJson(sparse)).toBe(hashJson(JSON.parse('{"a":[1,null,3]}')));
  });

  it('takes the same data with a hole or with null as one input', async () => {
    const first = await client.submitOnce(W, 'k1', { a: [1, null, 3] });
    // biome-ignore lint/suspicious/noSparseArray: the sparse array is the case under test
    const again = await client.submitOnce(W, 'k1', { a: [1, , 3] });
    expect(again.created).toBe(false);
    expect(again.runId).toBe(first.runId);
    const run = await client.getRun(first.runId);
    expect(run.input).toEqual({ a: [1, null, 3] });
  });
});
