/**
 * Core's retention (`Client.deleteFinishedRuns`) on a schema with the ledger: a deleted run's
 * ledger rows go with it (foreign key, `ON DELETE CASCADE`), the rows of the runs it keeps stay.
 */
import { Client, newAction, newWorkflow } from '@cyclone/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { getLedgerEntry } from '../src/index.js';
import { createTestDb, type TestDb } from './support/db.js';

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

const Noop = newWorkflow('idem_cleanup', {
  nodes: { step: { action: newAction('idem_cleanup', async () => null) } },
});

/** A run in `state` (finished 10 days ago unless running) with one ledger row. */
async function runWithRow(state: 'running' | 'completed' | 'failed'): Promise<string> {
  const { runId } = await client.submit(Noop, null);
  await db.pool.query(
    `INSERT INTO cyclone.cyclone_idempotency
       (run_id, key, node, request_hash, phase, owner_attempt)
     VALUES ($1, $2, 'step', 'h', 'succeeded', 1)`,
    [runId, `${runId}:step`],
  );
  await db.pool.query(
    `UPDATE cyclone.cyclone_runs SET state = $2,
       completed_at = CASE WHEN $2 = 'running' THEN NULL ELSE now() - interval '10 days' END
     WHERE id = $1`,
    [runId, state],
  );
  return runId;
}

describe('deleteFinishedRuns with the ledger', () => {
  it("takes a deleted run's ledger rows with it and leaves the others", async () => {
    const completed = await runWithRow('completed');
    const failed = await runWithRow('failed');
    const running = await runWithRow('running');
    expect(await client.deleteFinishedRuns({ olderThanMs: 86_400_000 })).toEqual({ deleted: 1 });
    expect(await getLedgerEntry(client, `${completed}:step`)).toBeUndefined();
    expect(await getLedgerEntry(client, `${failed}:step`)).toBeDefined();
    expect(await getLedgerEntry(client, `${running}:step`)).toBeDefined();
  });
});
