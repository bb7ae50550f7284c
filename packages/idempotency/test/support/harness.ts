/** Small helpers for the in-process tests: a fast worker, a step's recorded errors. */

import type { Client, StepError, Worker, Workflow } from '@cyclone/core';
import { startWorker as startTestWorker, type TestWorkerOptions } from '@cyclone/testkit-engine';
import type pg from 'pg';

/** Starts a worker with test timings (concurrency 4, 50 ms poll, 100 ms sweep, 5 s lease). */
export function startWorker(
  client: Client,
  // biome-ignore lint/suspicious/noExplicitAny: workflows of any input type
  workflows: Workflow<any>[],
  options: TestWorkerOptions = {},
): Promise<Worker> {
  return startTestWorker(client, workflows, { leaseMs: 5_000, sweepIntervalMs: 100, ...options });
}

/** The recorded failed attempts of a step. */
export async function stepErrors(pool: pg.Pool, runId: string, node: string): Promise<StepError[]> {
  const { rows } = await pool.query(
    'SELECT errors FROM cyclone.cyclone_steps WHERE run_id = $1 AND node = $2',
    [runId, node],
  );
  return (rows[0]?.errors ?? []) as StepError[];
}
