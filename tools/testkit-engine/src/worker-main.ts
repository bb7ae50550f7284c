/**
 * The main of a crash-test worker process (spawned by `spawnWorker` of @cyclone/testkit): a
 * `Client` on `DATABASE_URL` (the test file's database) and a started `Worker`, announced by
 * `READY <pid> <workerId>` on stdout.
 */
import { Client, Worker, type Workflow } from '@cyclone/core';
import {
  announceReady,
  engineClientOptions,
  engineWorkerOptions,
  envNumber,
  requireEnv,
} from '@cyclone/testkit';
import type { TestWorkerOptions } from './harness.js';

export interface ChildWorkerOptions extends TestWorkerOptions {
  // biome-ignore lint/suspicious/noExplicitAny: workflows of any input
  workflows: readonly Workflow<any>[];
}

/**
 * Starts the worker of this child process: concurrency 2, the lease of `CRASH_LEASE_MS`
 * (default 1 s), 50 ms poll, 250 ms sweep, which `options` override; then says READY.
 * @throws when `DATABASE_URL` is unset.
 */
export async function startChildWorker(options: ChildWorkerOptions): Promise<Worker> {
  const client = new Client({
    connectionString: requireEnv('DATABASE_URL'),
    poolSize: 4,
    ...engineClientOptions,
  });
  const worker = new Worker({
    client,
    concurrency: 2,
    leaseMs: envNumber('CRASH_LEASE_MS', 1_000),
    pollIntervalMs: 50,
    sweepIntervalMs: 250,
    ...engineWorkerOptions,
    ...options,
  });
  await worker.start();
  announceReady(worker.workerId);
  return worker;
}
