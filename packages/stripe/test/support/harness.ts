/**
 * In-process harness of the adapter tests: one isolated database per test file (db.ts), a real
 * `@cyclone/core` Client and Worker on it, and a fresh `FakeStripe` per test that the real
 * `stripe` SDK talks to over loopback.
 */
import {
  type Action,
  Client,
  newWorkflow,
  type RunInfo,
  type StepInfo,
  Worker,
} from '@cyclone/core';
import { type LedgerEntry, listLedgerEntries } from '@cyclone/idempotency';
import { FakeStripe } from '../../src/testing/index.js';
import { createTestDb, type TestDb } from './db.js';

/** Per-file state: the database and the client. */
export interface FileHarness {
  db: TestDb;
  client: Client;
  close(): Promise<void>;
}

/** Creates the file's database and client. */
export async function fileHarness(): Promise<FileHarness> {
  const db = await createTestDb();
  const client = new Client({ connectionString: db.url, poolSize: 6 });
  return {
    db,
    client,
    async close() {
      await client.close();
      await db.drop();
    },
  };
}

let seq = 0;

/** A one-node workflow around `action`, with a unique name per call (node name `node`). */
export function singleNode<I>(action: Action<I, unknown>, node = 'charge') {
  seq++;
  return newWorkflow<I>(`stripe_test_${seq}`, { nodes: { [node]: { action } } });
}

/** A unique action name. */
export function actionName(base: string): string {
  seq++;
  return `${base}_${seq}`;
}

/** Runs `workflow` once with `input` on a fresh worker; resolves with the finished run. */
export async function runOnce<I>(
  h: FileHarness,
  workflow: ReturnType<typeof singleNode<I>>,
  input: I,
  options: { timeoutMs?: number; leaseMs?: number } = {},
): Promise<{ run: RunInfo; step: StepInfo; ledger: LedgerEntry[]; runId: string }> {
  const worker = new Worker({
    client: h.client,
    workflows: [workflow],
    concurrency: 2,
    leaseMs: options.leaseMs ?? 5_000,
    pollIntervalMs: 25,
    sweepIntervalMs: 200,
  });
  await worker.start();
  try {
    const { runId } = await h.client.submit(workflow, input);
    const run = await h.client.waitForRun(runId, { timeoutMs: options.timeoutMs ?? 20_000 });
    return finished(h, runId, run);
  } finally {
    await worker.stop();
  }
}

async function finished(h: Pick<FileHarness, 'client'>, runId: string, run: RunInfo) {
  const step = run.steps[0];
  if (!step) throw new Error(`run ${runId} has no step`);
  const ledger = await listLedgerEntries(h.client, runId);
  return { run, step, ledger, runId };
}

/** Re-reads a run, its first step and its ledger rows. */
export async function inspect(h: Pick<FileHarness, 'client'>, runId: string) {
  return finished(h, runId, await h.client.getRun(runId));
}

/** Starts a fake Stripe for one test. */
export function startFake(): Promise<FakeStripe> {
  return FakeStripe.start();
}

/** Keys of the POST requests the fake saw, in order. */
export function postKeys(fake: FakeStripe, path?: string): (string | undefined)[] {
  return fake.requests
    .filter((r) => r.method === 'POST' && (path === undefined || r.path === path))
    .map((r) => r.idempotencyKey);
}
