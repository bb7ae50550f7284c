/**
 * In-process engine harness of the tests of packages built on @cyclone/core: a real `Worker`
 * with test-sized timings, one-node workflows around a handler, running a workflow once, and
 * reading a run's step.
 */
import {
  type ActionOptions,
  type Client,
  type Context,
  newAction,
  newWorkflow,
  type RunInfo,
  type StepInfo,
  Worker,
  type WorkerOptions,
  type Workflow,
} from '@cyclone/core';
import { engineWorkerOptions } from '@cyclone/testkit';

/** A one-node workflow (`name`, node `send`) around `handler`; retries every 50 ms by default. */
export function oneStep<I>(
  name: string,
  handler: (ctx: Context, input: I) => Promise<unknown>,
  options: ActionOptions<I> = {},
): Workflow<I> {
  const action = newAction<I, unknown>(`${name}_action`, handler, {
    maxAttempts: 5,
    backoff: () => 50,
    ...options,
  });
  return newWorkflow<I>(name, { nodes: { send: { action } } });
}

/** Worker settings of `startWorker`; the rest of `WorkerOptions` keeps the engine's defaults. */
export type TestWorkerOptions = Partial<Omit<WorkerOptions, 'client' | 'workflows'>>;

/**
 * A started worker for `workflows` with test-sized timings (concurrency 4, 2 s lease, 50 ms poll,
 * 200 ms sweep; no LISTEN behind PgBouncer, `engineWorkerOptions`), which `options` override.
 * Stop it with `stop()`.
 */
export async function startWorker(
  client: Client,
  // biome-ignore lint/suspicious/noExplicitAny: workflows of any input
  workflows: readonly Workflow<any>[],
  options: TestWorkerOptions = {},
): Promise<Worker> {
  const worker = new Worker({
    client,
    workflows,
    concurrency: 4,
    leaseMs: 2_000,
    pollIntervalMs: 50,
    sweepIntervalMs: 200,
    ...engineWorkerOptions,
    ...options,
  });
  await worker.start();
  return worker;
}

/** Submits `input` to `wf`, runs it on a fresh worker until terminal, and stops the worker. */
export async function runOnce<I>(
  client: Client,
  wf: Workflow<I>,
  input: I,
  timeoutMs = 15_000,
): Promise<RunInfo> {
  const worker = await startWorker(client, [wf]);
  try {
    const { runId } = await client.submit(wf, input);
    return await client.waitForRun(runId, { timeoutMs, pollMs: 25 });
  } finally {
    await worker.stop({ graceMs: 2_000 });
  }
}

/** The step `node` (default `send`) of a run. @throws when the run has no such node. */
export async function stepOf(client: Client, runId: string, node = 'send'): Promise<StepInfo> {
  const run = await client.getRun(runId);
  const step = run.steps.find((s) => s.node === node);
  if (!step) throw new Error(`run ${runId} has no node ${node}`);
  return step;
}
