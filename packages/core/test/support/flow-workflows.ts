/**
 * The flow-control tests' workflows, shared by the test (which submits them: whether a step is
 * limited is decided at submit from these definitions) and flow-worker.ts (which runs them).
 * Every handler records its start and end in `flow_log` (one row per attempt, times by
 * PostgreSQL's clock_timestamp()), so the test can check from the database what ran at once.
 */
import { newAction, newWorkflow } from '@cyclone/core';
import type pg from 'pg';

/** The input of every flow-control test step. */
export interface FlowInput {
  /** The key the keyed limits use; absent: no key. */
  k?: string;
  /** How long the handler runs, ms. */
  ms?: number;
  /** Hang until the process dies (the SIGKILL test), after printing `HANG <runId>`. */
  hang?: boolean;
}

/** The table the handlers write (made by the test). */
export const FLOW_LOG_DDL = `CREATE TABLE IF NOT EXISTS flow_log (
  run_id uuid NOT NULL, attempt int NOT NULL, action text NOT NULL, k text, pid int NOT NULL,
  started_at timestamptz NOT NULL DEFAULT clock_timestamp(), ended_at timestamptz,
  PRIMARY KEY (run_id, attempt))`;

let pool: pg.Pool | undefined;
let emit: (line: string) => void = () => {};

/** Gives the handlers their pool and the function that prints a protocol line. */
export function configureFlow(p: pg.Pool, e: (line: string) => void): void {
  pool = p;
  emit = e;
}

const handler =
  (action: string) =>
  async (ctx: { runId: string; attempt: number }, input: FlowInput): Promise<{ ok: true }> => {
    if (!pool) throw new Error('configureFlow was not called');
    await pool.query(
      'INSERT INTO flow_log (run_id, attempt, action, k, pid) VALUES ($1, $2, $3, $4, $5)',
      [ctx.runId, ctx.attempt, action, input.k ?? null, process.pid],
    );
    if (input.hang) {
      emit(`HANG ${ctx.runId}`);
      await new Promise(() => {});
    }
    await new Promise((r) => setTimeout(r, input.ms ?? 50));
    await pool.query(
      'UPDATE flow_log SET ended_at = clock_timestamp() WHERE run_id = $1 AND attempt = $2',
      [ctx.runId, ctx.attempt],
    );
    return { ok: true };
  };

const key = (i: FlowInput) => i.k;

/** At most 3 at once across every worker. */
export const Global3 = newWorkflow('fc_global', {
  nodes: {
    only: { action: newAction('fc_global', handler('fc_global'), { concurrency: { limit: 3 } }) },
  },
});
/** At most 1 at once per key. */
export const Keyed1 = newWorkflow('fc_keyed', {
  nodes: {
    only: {
      action: newAction('fc_keyed', handler('fc_keyed'), { concurrency: { limit: 1, key } }),
    },
  },
});
/** At most 5 starts per 1,000 ms across every worker. */
export const Rate5 = newWorkflow('fc_rate', {
  nodes: {
    only: {
      action: newAction('fc_rate', handler('fc_rate'), { rateLimit: { limit: 5, periodMs: 1000 } }),
    },
  },
});
/** At most 10 at once in all and 1 per key; a step without `k` has no key. */
export const Combined = newWorkflow('fc_combined', {
  nodes: {
    only: {
      action: newAction('fc_combined', handler('fc_combined'), {
        concurrency: [{ limit: 10 }, { limit: 1, key }],
      }),
    },
  },
});

export const FLOW_WORKFLOWS = [Global3, Keyed1, Rate5, Combined] as const;
