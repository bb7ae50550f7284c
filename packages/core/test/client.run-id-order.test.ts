/**
 * Run ids (UUIDv7) of one process are in creation order, within a millisecond too: a
 * `submitMany`'s runs in its input order, submits one after another ascending.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, newAction, newWorkflow } from '../src/index.js';
import { createTestDb, type TestDb } from './support/db.js';

const noop = newAction('id_order_noop', async () => null);
const W = newWorkflow('id_order', { nodes: { only: { action: noop } } });

const ascending = (ids: readonly string[]) =>
  ids.every((id, i) => i === 0 || (ids[i - 1] ?? '') < id);

describe('run ids in creation order', () => {
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

  it('a submitMany gives ascending ids in its input order', async () => {
    const { runIds } = await client.submitMany(
      W,
      Array.from({ length: 600 }, () => ({})),
    );
    expect(new Set(runIds).size).toBe(600);
    expect(ascending(runIds)).toBe(true);
  });

  it('submits one after another give ascending ids', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 100; i++) ids.push((await client.submit(W, {})).runId);
    expect(ascending(ids)).toBe(true);
  });
});
