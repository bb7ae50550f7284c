/**
 * Issue tests 1 and 7, with a real child worker process SIGKILLed right after the provider call
 * and before the step's completion commit (ARCHITECTURE.md § The crash matrix, row 2).
 */
import { Client, type Worker } from '@cyclone/core';
import { killAllChildren, spawnWorker } from '@cyclone/testkit';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { getLedgerEntry } from '../src/index.js';
import { BUSINESS_TABLE, businessRows, ChargeFlow, configureCrash } from './support/crash-flows.js';
import { createTestDb, type TestDb } from './support/db.js';
import { startWorker } from './support/harness.js';
import { FakeProvider } from './support/provider.js';

let db: TestDb;
let client: Client;
let provider: FakeProvider | undefined;
let rescuer: Worker | undefined;

beforeAll(async () => {
  db = await createTestDb();
  await db.pool.query(BUSINESS_TABLE);
  client = new Client({ connectionString: db.url, poolSize: 4 });
});

afterEach(async () => {
  await killAllChildren();
  await rescuer?.stop({ graceMs: 1_000 });
  rescuer = undefined;
  await provider?.close();
  provider = undefined;
});

afterAll(async () => {
  await client.close();
  await db.drop();
});

/** The victim child: runs attempt 1, prints AFTER_CALL after the provider answered, is killed. */
async function crashAfterCall(p: FakeProvider, useCompletionTx: boolean) {
  const child = await spawnWorker({
    script: new URL('./support/crash-worker.ts', import.meta.url),
    env: { DATABASE_URL: db.url, PROVIDER_URL: p.url, CRASH_VICTIM: '1', CRASH_LEASE_MS: '1000' },
  });
  const { runId } = await client.submit(ChargeFlow, { amount: 42, useCompletionTx });
  await child.waitForLine(new RegExp(`^AFTER_CALL ${runId} 1$`));
  expect((await child.kill('SIGKILL')).signal).toBe('SIGKILL');
  return runId;
}

async function rescue(p: FakeProvider): Promise<void> {
  configureCrash({ providerUrl: p.url, victim: false, emit: () => {} });
  rescuer = await startWorker(client, [ChargeFlow]);
}

describe('a worker SIGKILLed after the provider call, before the step completed', () => {
  it('test 1: the next attempt returns the stored result with zero provider calls', async () => {
    provider = await FakeProvider.start();
    const runId = await crashAfterCall(provider, false);
    const key = `${runId}:charge`;

    // The evidence was committed before the step: succeeded in the ledger, step still running,
    // its completionTx (the business row) gone with the process.
    const effect = provider.effects[0];
    expect(provider.received).toHaveLength(1);
    expect(await getLedgerEntry(client, key)).toMatchObject({
      phase: 'succeeded',
      ownerAttempt: 1,
      calls: 1,
      providerRef: effect?.id,
      result: { id: effect?.id, key },
    });
    expect((await client.getRun(runId)).steps[0]?.state).toBe('running');
    expect(await businessRows(db.pool, runId)).toBe(0);

    await rescue(provider);
    const run = await client.waitForRun(runId, { timeoutMs: 20_000 });
    expect(run.state).toBe('completed');
    expect(run.steps[0]).toMatchObject({ attempt: 2, output: { effectId: effect?.id } });
    expect(provider.received).toHaveLength(1); // attempt 2 made no call
    expect(provider.effects).toHaveLength(1);
    expect(await businessRows(db.pool, runId)).toBe(1);
  });

  it('test 7: with completionTx, neither the step nor the ledger success survives the crash, and the retry does not charge twice (the provider deduplicates by key)', async () => {
    provider = await FakeProvider.start({ dedupe: true });
    const runId = await crashAfterCall(provider, true);
    const key = `${runId}:charge`;

    // The success was written on the completionTx, which died with the process.
    expect(provider.effects).toHaveLength(1);
    const entry = await getLedgerEntry(client, key);
    expect(entry).toMatchObject({ phase: 'started', ownerAttempt: 1, calls: 1, result: null });
    expect(entry?.callStartedAt).toBeInstanceOf(Date);
    expect((await client.getRun(runId)).steps[0]?.state).toBe('running');
    expect(await businessRows(db.pool, runId)).toBe(0);

    // The retry sees an unknown outcome; after the quiet period, policy recall calls again with
    // the same key and the provider replays its stored response.
    await rescue(provider);
    const run = await client.waitForRun(runId, { timeoutMs: 20_000 });
    expect(run.state).toBe('completed');
    expect(provider.received.map((r) => r.key)).toEqual([key, key]);
    expect(provider.received.map((r) => r.replayed)).toEqual([false, true]);
    expect(provider.effects).toHaveLength(1);
    expect(run.steps[0]?.output).toEqual({ effectId: provider.effects[0]?.id });
    expect(await getLedgerEntry(client, key)).toMatchObject({ phase: 'succeeded', calls: 2 });
    expect(await businessRows(db.pool, runId)).toBe(1);
  });
});
