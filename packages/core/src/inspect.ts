/**
 * Inspection (`Client.getRun`, `listRuns`, `waitForRun`): reads runs and their steps and maps the
 * rows to `RunInfo`, `RunSummary` and `StepInfo`.
 */
import type { Db } from './db.js';
import { RunNotFoundError, WaitTimeoutError } from './errors.js';
import { isStorableText } from './json.js';
import * as runsSql from './sql/runs.js';
import type { RunInfo, RunState, RunSummary, StepInfo } from './types.js';

/** Filters of `listRuns`. */
export interface ListRunsOptions {
  state?: RunState;
  workflow?: string;
  /** Most runs returned, newest first. Default 50, at most 1,000. */
  limit?: number;
}

/** `Client.getRun`: the run's row, then its steps with each step's direct upstream nodes. */
export async function getRun(db: Db, runId: string): Promise<RunInfo> {
  if (!isUuid(runId)) throw new RunNotFoundError(String(runId));
  const r = await runsSql.selectRun(db.pool, db, runId);
  if (!r) throw new RunNotFoundError(runId);
  const steps = await runsSql.selectSteps(db.pool, db, runId);
  const after = upstreamOf(steps);
  return { ...toSummary(r), input: r.input, steps: steps.map((s) => toStep(s, after)) };
}

/** `Client.listRuns`: the limit clamped, then one query. */
export async function listRuns(db: Db, options: ListRunsOptions): Promise<RunSummary[]> {
  const asked = Number(options.limit ?? 50);
  const limit = Math.min(Math.max(1, Math.trunc(Number.isFinite(asked) ? asked : 50)), 1000);
  if (options.workflow !== undefined && !isStorableText(String(options.workflow))) return [];
  const rows = await runsSql.listRuns(db.pool, db, {
    state: options.state ?? null,
    workflow: options.workflow ?? null,
    limit,
  });
  return rows.map((r) => ({ ...toSummary(r), stepsRemaining: r.steps_remaining }));
}

/**
 * How many runs `listRuns` would find with these filters and no limit, counted up to `cap` (the
 * CLI's "50 of N"): `{ count, capped }`, where `capped` means there are at least `cap`.
 */
export async function countRuns(
  db: Db,
  options: Omit<ListRunsOptions, 'limit'>,
  cap: number,
): Promise<{ count: number; capped: boolean }> {
  if (options.workflow !== undefined && !isStorableText(String(options.workflow))) {
    return { count: 0, capped: false };
  }
  const count = await runsSql.countRuns(db.pool, db, {
    state: options.state ?? null,
    workflow: options.workflow ?? null,
    cap,
  });
  return { count, capped: count >= cap };
}

/** `Client.waitForRun`: `getRun` every `pollMs` until the run is terminal or time runs out. */
export async function waitForRun(
  db: Db,
  runId: string,
  options: { timeoutMs?: number; pollMs?: number },
): Promise<RunInfo> {
  const timeoutMs = options.timeoutMs ?? 60_000;
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const run = await getRun(db, runId);
    if (run.state !== 'running') return run;
    if (Date.now() >= deadline) throw new WaitTimeoutError(runId, timeoutMs);
    await new Promise((r) =>
      setTimeout(r, Math.min(options.pollMs ?? 100, Math.max(1, deadline - Date.now()))),
    );
  }
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** True for a string in the uuid text form; anything else cannot be a run id. */
export function isUuid(s: unknown): s is string {
  return typeof s === 'string' && UUID.test(s);
}

/**
 * Each node's direct upstream nodes, sorted by name, from the stored DAG: the `downstream` column
 * of the step rows already read, inverted (no further query).
 */
function upstreamOf(
  rows: readonly { node: string; downstream: string[] }[],
): Map<string, string[]> {
  const after = new Map<string, string[]>(rows.map((r) => [r.node, []]));
  for (const r of rows) for (const d of r.downstream) after.get(d)?.push(r.node);
  for (const nodes of after.values()) nodes.sort();
  return after;
}

// biome-ignore lint/suspicious/noExplicitAny: rows from pg are untyped
function toSummary(r: any): Omit<RunInfo, 'steps' | 'input'> {
  return {
    runId: r.id,
    workflow: r.workflow,
    state: r.state,
    submitKey: r.submit_key,
    createdAt: r.created_at,
    updatedAt: r.updated_at,
    completedAt: r.completed_at,
  };
}

// biome-ignore lint/suspicious/noExplicitAny: rows from pg are untyped
function toStep(r: any, after: ReadonlyMap<string, string[]>): StepInfo {
  return {
    node: r.node,
    action: r.action,
    state: r.state,
    attempt: r.attempt,
    maxAttempts: r.max_attempts,
    depsRemaining: r.deps_remaining,
    reopenedAfterAttempt: r.reopened_after_attempt,
    output: r.output,
    errors: r.errors,
    scheduledAt: r.scheduled_at,
    snoozes: r.snoozes,
    leaseOwner: r.lease_owner,
    leaseExpiresAt: r.lease_expires_at,
    startedAt: r.started_at,
    completedAt: r.completed_at,
    concurrencyKey: r.concurrency_key ?? null,
    rateLimitKey: r.rate_limit_key ?? null,
    priority: r.priority ?? 0,
    waitFor: r.wait_for ?? null,
    waitDeadline: r.wait_deadline ?? null,
    after: after.get(r.node) ?? [],
  };
}
