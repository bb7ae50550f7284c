/**
 * In-process harness of the http tests: one isolated database per test file (db.ts), a real
 * `@cyclone/core` Client and Worker on it, and a `FakeHttpApi` the handlers call over loopback.
 */
import {
  type ActionOptions,
  Client,
  type Context,
  newAction,
  newWorkflow,
  type RunInfo,
  type StepInfo,
  Worker,
  type Workflow,
} from '@cyclone/core';
import { type LedgerEntry, listLedgerEntries } from '@cyclone/idempotency';
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

/**
 * A one-node workflow (node `ship` unless `node`) around `handler`, with unique names; five
 * attempts 50 ms apart unless `options` say otherwise.
 */
export function oneNode<I = Record<string, never>>(
  handler: (ctx: Context, input: I) => Promise<unknown>,
  options: ActionOptions<I> & { node?: string } = {},
): Workflow<I> {
  seq++;
  const { node = 'ship', ...actionOptions } = options;
  const action = newAction<I, unknown>(`http_test_${seq}`, handler, {
    maxAttempts: 5,
    backoff: () => 50,
    ...actionOptions,
  });
  return newWorkflow<I>(`http_test_wf_${seq}`, { nodes: { [node]: { action } } });
}

/** A started worker for `workflows`, with test-sized timings. */
export async function startWorker(
  h: Pick<FileHarness, 'client'>,
  // biome-ignore lint/suspicious/noExplicitAny: workflows of any input
  workflows: Workflow<any>[],
  leaseMs = 5_000,
): Promise<Worker> {
  const worker = new Worker({
    client: h.client,
    workflows,
    concurrency: 4,
    leaseMs,
    pollIntervalMs: 25,
    sweepIntervalMs: 200,
  });
  await worker.start();
  return worker;
}

/** Runs `workflow` once with `input` on a fresh worker; resolves with the finished run. */
export async function runOnce<I>(
  h: FileHarness,
  workflow: Workflow<I>,
  input: I,
  options: { timeoutMs?: number; leaseMs?: number } = {},
): Promise<{ run: RunInfo; step: StepInfo; ledger: LedgerEntry[]; runId: string }> {
  const worker = await startWorker(h, [workflow], options.leaseMs);
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
