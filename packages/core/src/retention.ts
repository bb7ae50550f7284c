/**
 * Retention (`Client.deleteFinishedRuns`): deletes finished runs in bounded batches, so the hot
 * tables do not bloat with history, after checking its options.
 */
import type { Db } from './db.js';
import { ConfigError } from './errors.js';
import { isStorableText } from './json.js';
import type { Logger } from './logger.js';
import * as runsSql from './sql/runs.js';

/** A finished run state: what `deleteFinishedRuns` may delete. */
export type FinishedRunState = 'completed' | 'failed' | 'cancelled';

/** Options of `deleteFinishedRuns`. */
export interface DeleteFinishedRunsOptions {
  /**
   * Minimum age in ms of a finished run, counted from its `completed_at` (when it reached its
   * final state). An integer ≥ 0. Keep runs longer than a duplicate `submitOnce` can arrive:
   * once a run is deleted, its key makes a new run.
   */
  olderThanMs: number;
  /** Runs deleted per batch (one short transaction each). An integer from 1 to 100,000; default 1,000. */
  batchSize?: number;
  /** Stop after deleting this many runs (an integer ≥ 1). Default: no limit. */
  maxRuns?: number;
  /**
   * The run states to delete. Default `['completed', 'cancelled']`: failed runs are kept unless
   * asked for, since an operator may still retry them. A `running` run is never deleted.
   */
  states?: readonly FinishedRunState[];
  /** Only runs of this workflow. Default: every workflow. */
  workflow?: string;
}

/** Result of `deleteFinishedRuns`. */
export interface DeleteFinishedRunsResult {
  /** Runs deleted (their steps and ledger rows went with them). */
  deleted: number;
}

/** Every finished run state. */
export const FINISHED_RUN_STATES: readonly FinishedRunState[] = [
  'completed',
  'failed',
  'cancelled',
];
/** The finished run states `deleteFinishedRuns` deletes by default. */
export const DEFAULT_DELETE_STATES: readonly FinishedRunState[] = ['completed', 'cancelled'];
/** The largest `deleteFinishedRuns` batch. */
const MAX_DELETE_BATCH = 100_000;
/** Ages above this (~317 years) delete the same runs and would overflow PostgreSQL's timestamps. */
const MAX_AGE_MS = 1e13;

/**
 * `Client.deleteFinishedRuns`: one short statement per batch until a batch comes back short or
 * `maxRuns` runs are deleted.
 * @throws ConfigError for a bad option; nothing is deleted.
 */
export async function deleteFinishedRuns(
  db: Db,
  logger: Logger,
  options: DeleteFinishedRunsOptions,
): Promise<DeleteFinishedRunsResult> {
  const o = validateDeleteOptions(options);
  // No workflow has a name PostgreSQL cannot store (NUL, lone surrogates).
  if (o.workflow !== null && !isStorableText(o.workflow)) return { deleted: 0 };
  let deleted = 0;
  for (;;) {
    const limit = Math.min(o.batchSize, o.maxRuns - deleted);
    if (limit <= 0) break;
    const n = await runsSql.deleteFinishedRuns(db.pool, db, {
      states: o.states,
      olderThanMs: o.olderThanMs,
      workflow: o.workflow,
      limit,
    });
    deleted += n;
    logger.debug({ deleted: n, total: deleted }, 'deleted a batch of finished runs');
    if (n < limit) break;
  }
  return { deleted };
}

/** `deleteFinishedRuns`'s options checked and defaulted. @throws ConfigError. */
function validateDeleteOptions(options: DeleteFinishedRunsOptions): {
  olderThanMs: number;
  batchSize: number;
  maxRuns: number;
  states: FinishedRunState[];
  workflow: string | null;
} {
  if (typeof options !== 'object' || options === null) {
    throw new ConfigError('deleteFinishedRuns needs an options object with olderThanMs');
  }
  const integer = (name: string, value: unknown, min: number, max: number): number => {
    if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < min || value > max) {
      const range = max === Number.MAX_SAFE_INTEGER ? `≥ ${min}` : `from ${min} to ${max}`;
      throw new ConfigError(
        `deleteFinishedRuns: ${name} must be an integer ${range}, got ${describeValue(value)}`,
      );
    }
    return value;
  };
  const olderThanMs = integer('olderThanMs', options.olderThanMs, 0, Number.MAX_SAFE_INTEGER);
  const batchSize = integer('batchSize', options.batchSize ?? 1000, 1, MAX_DELETE_BATCH);
  const maxRuns =
    options.maxRuns === undefined
      ? Number.POSITIVE_INFINITY
      : integer('maxRuns', options.maxRuns, 1, Number.MAX_SAFE_INTEGER);
  const states = options.states ?? DEFAULT_DELETE_STATES;
  if (
    !Array.isArray(states) ||
    states.length === 0 ||
    // Spread, so a hole in a sparse array counts as a bad state.
    [...states].some((s) => !FINISHED_RUN_STATES.includes(s))
  ) {
    throw new ConfigError(
      `deleteFinishedRuns: states must be a non-empty array of 'completed', 'failed' and 'cancelled' (a running run is never deleted), got ${describeValue(states)}`,
    );
  }
  if (options.workflow !== undefined && typeof options.workflow !== 'string') {
    throw new ConfigError(
      `deleteFinishedRuns: workflow must be a string, got ${describeValue(options.workflow)}`,
    );
  }
  return {
    olderThanMs: Math.min(olderThanMs, MAX_AGE_MS),
    batchSize,
    maxRuns,
    states: [...new Set(states)],
    workflow: options.workflow ?? null,
  };
}

/** A short, safe rendering of a bad option value for an error message. */
function describeValue(v: unknown): string {
  if (typeof v === 'string') return JSON.stringify(v.length > 40 ? `${v.slice(0, 40)}…` : v);
  if (typeof v === 'number' || typeof v === 'boolean' || v === null || v === undefined)
    return String(v);
  if (Array.isArray(v)) {
    const shown = [...v.slice(0, 5)].map((e) =>
      typeof e === 'object' && e !== null ? typeof e : describeValue(e),
    );
    return `[${shown.join(', ')}${v.length > 5 ? ', …' : ''}]`;
  }
  return typeof v;
}
