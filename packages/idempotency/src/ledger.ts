/**
 * The ledger outside a handler: its migration, inspection, operator resolution of unknown
 * outcomes, and retention.
 */
import { type Client, type Json, PayloadError } from '@cyclone/core';
import { applyMigrations, toJson } from '@cyclone/core/internal';
import { IdempotencyPayloadError, IdempotencyUsageError, type StoredFailure } from './errors.js';
import { migrations } from './migrations.generated.js';
import * as sql from './sql.js';

/**
 * Applies the migrations of the ledger (component `idempotency`, same schema and mechanism as
 * core: `applyMigrations`, advisory-locked, so concurrent calls are safe). Applies core's
 * migrations first (a no-op when current), since every ledger row references its run.
 * @returns the names of the ledger migrations applied now (empty when up to date).
 * @throws the database error of a failing migration (nothing of that call is applied).
 */
export async function migrateIdempotency(client: Client): Promise<string[]> {
  await client.migrate();
  return applyMigrations(client.pool, client.schema, 'idempotency', migrations);
}

/** Ledger phases: where a key's call stands (see `LedgerEntry.phase`). */
export type LedgerPhase = 'started' | 'succeeded' | 'failed' | 'unknown';

/** One ledger row (`cyclone_idempotency`), as `getLedgerEntry` returns it. */
export interface LedgerEntry {
  runId: string;
  /** `${runId}:${node}[:${scope}]`. */
  key: string;
  node: string;
  scope: string | null;
  provider: string | null;
  operation: string | null;
  /** SHA-256 (hex) of the canonical JSON of `{ provider, operation, request }`. */
  requestHash: string;
  /**
   * `started`: claimed; a call is in flight or its outcome was never recorded (`callStartedAt`
   * set), or nothing was sent (`callStartedAt` null). `succeeded`: `result` is final.
   * `failed`: `error` is definitive. `unknown`: the call may or may not have taken effect.
   */
  phase: LedgerPhase;
  /** Bumped by an operator retry after a definitive failure (native key `…#g<n>`). */
  generation: number;
  /** The step attempt that holds the row (fencing token). */
  ownerAttempt: number;
  /** When the last call was let through (database clock); null when none is outstanding. */
  callStartedAt: Date | null;
  /** Calls let through for this key, across attempts and generations. */
  calls: number;
  /** The provider's reference (`pi_…`, `SM…`), when `options.reference` gave one. */
  providerRef: string | null;
  result: Json | null;
  /** The last failure recorded for the key (kept after a later success, for the record). */
  error: StoredFailure | null;
  createdAt: Date;
  updatedAt: Date;
}

// biome-ignore lint/suspicious/noExplicitAny: rows from pg are untyped
function toEntry(r: any): LedgerEntry {
  return {
    runId: r.run_id,
    key: r.key,
    node: r.node,
    scope: r.scope,
    provider: r.provider,
    operation: r.operation,
    requestHash: r.request_hash,
    phase: r.phase,
    generation: r.generation,
    ownerAttempt: r.owner_attempt,
    callStartedAt: r.call_started_at,
    calls: r.calls,
    providerRef: r.provider_ref,
    result: r.result,
    error: r.error,
    createdAt: r.created_at,
    updatedAt: r.updated_at,
  };
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** The run id a ledger key starts with. @throws IdempotencyUsageError for another string. */
function runIdOf(key: string): string {
  const runId = typeof key === 'string' ? key.slice(0, 36) : '';
  if (!UUID.test(runId) || key[36] !== ':') {
    throw new IdempotencyUsageError(
      `${JSON.stringify(String(key).slice(0, 80))} is not an idempotency key (runId:node[:scope])`,
    );
  }
  return runId;
}

/**
 * The ledger row of a key, or `undefined` when there is none.
 * @throws IdempotencyUsageError when `key` does not start with `${uuid}:`.
 */
export async function getLedgerEntry(
  client: Client,
  key: string,
): Promise<LedgerEntry | undefined> {
  const { rows } = await client.pool.query(sql.selectRow(client.db.q), [runIdOf(key), key]);
  return rows[0] ? toEntry(rows[0]) : undefined;
}

/**
 * Every ledger row of a run, ordered by key.
 * @throws IdempotencyUsageError when `runId` is not a uuid.
 */
export async function listLedgerEntries(client: Client, runId: string): Promise<LedgerEntry[]> {
  if (typeof runId !== 'string' || !UUID.test(runId)) {
    throw new IdempotencyUsageError(`${JSON.stringify(runId)} is not a run id`);
  }
  const { rows } = await client.pool.query(sql.selectRun(client.db.q), [runId]);
  return rows.map(toEntry);
}

/** An operator's verdict on a key, for `resolveKey`. */
export type Resolution =
  | {
      /** The effect happened: later attempts return `result` without calling. */
      outcome: 'succeeded';
      /** JSON, the shape the guarded call returns. */
      result: unknown;
      providerRef?: string;
    }
  | {
      /**
       * The effect did not happen: the next attempt calls again — with the same key after an
       * unknown outcome, with a fresh generation (`#g<n+1>`) after a definitive failure.
       */
      outcome: 'not_sent';
    };

/**
 * Operator resolution of a key whose outcome `once` cannot decide on its own — typically after
 * policy `fail` discarded the step with `UnknownOutcomeError`: check the provider, resolve the
 * key, then `client.retry(runId, node)`. Refused while the step is running (a call may be in
 * flight) and for a `succeeded` key (a success is final).
 * @returns the row after the change.
 * @throws IdempotencyUsageError for a malformed key, a key with no row, a `succeeded` key, a
 *   running step or a bad resolution; IdempotencyPayloadError when `result` is not JSON.
 */
export async function resolveKey(
  client: Client,
  key: string,
  resolution: Resolution,
): Promise<LedgerEntry> {
  const runId = runIdOf(key);
  if (
    !resolution ||
    (resolution.outcome !== 'succeeded' && resolution.outcome !== 'not_sent') ||
    (resolution.outcome === 'succeeded' &&
      resolution.providerRef !== undefined &&
      typeof resolution.providerRef !== 'string')
  ) {
    throw new IdempotencyUsageError(
      "resolution must be { outcome: 'succeeded', result, providerRef? } or { outcome: 'not_sent' }",
    );
  }
  let result: string | null = null;
  if (resolution.outcome === 'succeeded') {
    try {
      result = JSON.stringify(toJson(resolution.result === undefined ? null : resolution.result));
    } catch (err) {
      if (err instanceof PayloadError) {
        throw new IdempotencyPayloadError('result', err.message, err.path, err);
      }
      throw err;
    }
  }
  const providerRef = resolution.outcome === 'succeeded' ? (resolution.providerRef ?? null) : null;
  const r = await client.pool.query(sql.resolve(client.db.q), [
    runId,
    key,
    resolution.outcome,
    result,
    providerRef,
  ]);
  if (!r.rows[0]) {
    const entry = await getLedgerEntry(client, key);
    if (!entry) throw new IdempotencyUsageError(`no ledger row for key ${key}`);
    if (entry.phase === 'succeeded') {
      throw new IdempotencyUsageError(`key ${key} already succeeded; a success is final`);
    }
    throw new IdempotencyUsageError(
      `the step of key ${key} is running; resolve a key only while its step is not running`,
    );
  }
  return (await getLedgerEntry(client, key)) as LedgerEntry;
}

/** Options of `reapLedger`. */
export interface ReapOptions {
  /**
   * Minimum age in ms of a finished run (since its `completed_at`) before its rows go. Keep it
   * longer than anyone would retry a cancelled run, and never shorter than the providers' key
   * windows (Stripe: 24 h); about 72 h leaves a margin over those windows for late retries.
   */
  olderThanMs: number;
  /**
   * Run states whose rows may go. Default `['completed', 'cancelled']`. A completed run has no
   * step left to retry; a cancelled one can still be reopened by `client.retry`, so pass
   * `['completed']` to keep its rows until the run itself is deleted.
   */
  states?: readonly ('completed' | 'cancelled')[];
  /** Rows deleted per statement. Default 1,000. */
  batchSize?: number;
}

/**
 * Retention: deletes the ledger rows of finished runs (completed, or
 * cancelled) that finished more than `olderThanMs` ago, in bounded batches, and never rows of
 * `running` or `failed` runs — an operator retry of those may still need them. Rows of deleted
 * runs go with the run (foreign key, `ON DELETE CASCADE`).
 * @returns the number of rows deleted.
 * @throws IdempotencyUsageError for a negative or non-finite age, a bad state or batch size.
 */
export async function reapLedger(client: Client, options: ReapOptions): Promise<number> {
  const { olderThanMs } = options ?? {};
  if (typeof olderThanMs !== 'number' || !Number.isFinite(olderThanMs) || olderThanMs < 0) {
    throw new IdempotencyUsageError(`olderThanMs must be a finite number ≥ 0, got ${olderThanMs}`);
  }
  const states = options.states ?? ['completed', 'cancelled'];
  if (
    !Array.isArray(states) ||
    states.length === 0 ||
    states.some((s) => s !== 'completed' && s !== 'cancelled')
  ) {
    throw new IdempotencyUsageError(
      "states must be a non-empty array of 'completed' and 'cancelled'",
    );
  }
  const batchSize = options.batchSize ?? 1000;
  if (!Number.isInteger(batchSize) || batchSize < 1) {
    throw new IdempotencyUsageError(`batchSize must be an integer ≥ 1, got ${batchSize}`);
  }
  let total = 0;
  for (;;) {
    const { rows } = await client.pool.query<{ deleted: number }>(sql.reap(client.db.q), [
      olderThanMs,
      states,
      batchSize,
    ]);
    const n = rows[0]?.deleted ?? 0;
    total += n;
    if (n < batchSize) return total;
  }
}
