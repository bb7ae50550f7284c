/**
 * Step 1 of `once`'s protocol, the claim of a key, committed before any call: the fast insert,
 * else the decision table on the existing row, locked (`decideOnLockedRow`). This is the part of
 * the protocol that decides whether a call may be made at all.
 */
import { type Context, type Json, LeaseLostError } from '@cyclone/core';
import { isConnectionError, selectStepHeld } from '@cyclone/core/internal';
import {
  DefinitiveFailureError,
  IdempotencyConflictError,
  IdempotencyMismatchError,
  InProgressError,
  type StoredFailure,
  UnknownOutcomeError,
} from './errors.js';
import type { Normalised } from './once-options.js';
import * as sql from './sql.js';

/** What the claim decided. */
export type Decision =
  | { kind: 'replay'; result: Json }
  | {
      kind: 'call';
      generation: number;
      calls: number;
      recall: boolean;
      /** `performance.now()` taken before the statement that stamped the call's start. */
      stampedAt: number;
    }
  | { kind: 'reconcile'; generation: number; callStartedAt: Date | null; ownerAttempt: number }
  | { kind: 'again' };

/** An error to throw once the claim transaction ends: committed first (policy `fail`) or not. */
interface Thrown {
  kind: 'throw';
  error: Error;
  commit: boolean;
}

const thrown = (error: Error, commit = false): Thrown => ({ kind: 'throw', error, commit });

interface LockedRow {
  node: string;
  phase: 'started' | 'succeeded' | 'failed' | 'unknown';
  request_hash: string;
  generation: number;
  owner_attempt: number;
  calls: number;
  result: Json;
  error: StoredFailure | null;
  provider_ref: string | null;
  call_started_at: Date | null;
  call_age_ms: number | null;
  discarded_since: boolean;
}

/** The error of an attempt whose step was taken over (its fencing token is gone). */
export function leaseLost(ctx: Context): LeaseLostError {
  return new LeaseLostError(ctx.runId, ctx.node, ctx.attempt);
}

/** Step 1 of the protocol: the fast insert, else the decision on the locked existing row. */
export async function claimKey<T>(ctx: Context, opts: Normalised<T>): Promise<Decision> {
  const { pool, q } = ctx.client.db;
  // No later than the server's stamp of the call's start, whichever statement makes it below.
  const stampedAt = performance.now();
  const inserted = await pool.query<{
    inserted: boolean;
    generation: number;
    calls: number;
    phase: string | null;
    request_hash: string | null;
    result: Json;
  }>(sql.insertStarted(q), [
    ctx.runId,
    opts.key,
    ctx.node,
    opts.scope,
    opts.provider,
    opts.operation,
    opts.hash,
    ctx.attempt,
  ]);
  const first = inserted.rows[0];
  if (first?.inserted) {
    return {
      kind: 'call',
      generation: first.generation,
      calls: first.calls,
      recall: false,
      stampedAt,
    };
  }
  // A success is final: replay it without locking. Anything else takes the locked path.
  if (first?.phase === 'succeeded' && first.request_hash === opts.hash) {
    return { kind: 'replay', result: first.result };
  }

  const c = await pool.connect();
  // pg emits 'error' on a checked-out connection that dies (a terminated backend, a pooler
  // restarted); without a listener that crashes the process. The statement in flight fails too,
  // which is what this path acts on.
  let lost: Error | undefined;
  const onError = (err: Error) => {
    lost = err;
  };
  c.on('error', onError);
  const release = (err?: Error) => {
    c.removeListener('error', onError);
    c.release(lost ?? err);
  };
  let result: Decision | Thrown;
  try {
    await c.query('BEGIN');
    await c.query(`SELECT set_config('lock_timeout', $1, true)`, [`${opts.lockTimeoutMs}ms`]);
    const { rows } = await c.query<LockedRow>(sql.lockRow(q), [ctx.runId, opts.key, ctx.attempt]);
    const row = rows[0];
    if (row) {
      result = await decideOnLockedRow(ctx, opts, row, c, stampedAt);
    } else {
      // No row and no insert: the step fence failed, or the row vanished (reaped) meanwhile.
      const f = await c.query<{ held: boolean }>(selectStepHeld(q), [
        ctx.runId,
        ctx.node,
        ctx.attempt,
      ]);
      result = f.rows[0]?.held ? { kind: 'again' } : thrown(leaseLost(ctx));
    }
    await c.query(result.kind === 'throw' && !result.commit ? 'ROLLBACK' : 'COMMIT');
  } catch (err) {
    await c.query('ROLLBACK').catch(() => {});
    release(isConnectionError(err) ? (err as Error) : undefined);
    if ((err as { code?: unknown })?.code === '55P03') {
      throw new IdempotencyConflictError(
        opts.key,
        `its ledger row stayed locked for more than ${opts.lockTimeoutMs} ms (another attempt is recording an outcome)`,
        err,
      );
    }
    throw err;
  }
  release();
  if (result.kind === 'throw') throw result.error;
  return result;
}

interface Queryable {
  query<R extends Record<string, unknown>>(
    text: string,
    values?: unknown[],
  ): Promise<{ rows: R[]; rowCount: number | null }>;
}

/**
 * The decision on an existing row (step 1 of the protocol), inside the claim transaction with
 * the row locked:
 * - another request hash → `IdempotencyMismatchError`;
 * - `succeeded` → replay the stored result;
 * - owned by a newer attempt → this attempt is a zombie: `LeaseLostError`;
 * - `failed` → replay the definitive error, unless this attempt comes from an operator retry
 *   (core's `reopened_after_attempt` on the step is ≥ the owner's attempt and < this one):
 *   then generation + 1 and call;
 * - `started` with no call stamped (claimed, nothing sent; or not sent) → take over and call;
 * - `started` with a call by this same attempt → `IdempotencyConflictError`;
 * - otherwise an unknown outcome: within the quiet period `InProgressError` (a snooze until it
 *   ends), after it the policy.
 */
async function decideOnLockedRow<T>(
  ctx: Context,
  opts: Normalised<T>,
  row: LockedRow,
  c: Queryable,
  stampedAt: number,
): Promise<Decision | Thrown> {
  const { q } = ctx.client.db;
  if (row.request_hash !== opts.hash) {
    return thrown(new IdempotencyMismatchError(opts.key, opts.hash, row.request_hash));
  }
  if (row.phase === 'succeeded') return { kind: 'replay', result: row.result };
  if (row.owner_attempt > ctx.attempt) return thrown(leaseLost(ctx));

  const takeOver = async (bump: 0 | 1, recall: boolean): Promise<Decision | Thrown> => {
    const r = await c.query<{ generation: number; calls: number }>(sql.takeOver(q), [
      ctx.runId,
      opts.key,
      ctx.node,
      ctx.attempt,
      bump,
    ]);
    const t = r.rows[0];
    return t
      ? { kind: 'call', generation: t.generation, calls: t.calls, recall, stampedAt }
      : thrown(leaseLost(ctx));
  };

  if (row.phase === 'failed') {
    if (row.owner_attempt < ctx.attempt && row.discarded_since) return takeOver(1, false);
    const failure: StoredFailure = row.error ?? {
      name: 'Error',
      message: 'the call failed definitively',
      outcome: 'definitive',
      at: new Date(0).toISOString(),
    };
    return thrown(new DefinitiveFailureError(opts.key, row.generation, failure, true));
  }
  if (row.phase === 'started' && row.call_started_at === null) return takeOver(0, false);
  if (row.phase === 'started' && row.owner_attempt === ctx.attempt) {
    return thrown(
      new IdempotencyConflictError(
        opts.key,
        'another once() of this same attempt is calling under it (calls for one key must not run concurrently)',
      ),
    );
  }

  // An unknown outcome: `unknown`, or `started` with a call by an earlier attempt. Within the
  // quiet period, snooze until it ends (no attempt used), so the policy always gets to run.
  const age = row.call_age_ms ?? Number.POSITIVE_INFINITY;
  if (age < opts.quietPeriodMs) {
    return thrown(new InProgressError(opts.key, row.owner_attempt, opts.quietPeriodMs - age));
  }
  if (opts.onUnknown === 'fail') {
    const failure: StoredFailure = {
      name: 'UnknownOutcomeError',
      message: `the call made by attempt ${row.owner_attempt} never recorded an outcome`,
      outcome: 'ambiguous',
      reason: 'abandoned call',
      at: new Date().toISOString(),
    };
    await c.query(sql.markUnknown(q), [ctx.runId, opts.key, JSON.stringify(failure)]);
    const reason = row.error?.reason ?? (row.phase === 'started' ? 'abandoned call' : undefined);
    return thrown(
      new UnknownOutcomeError(opts.key, row.owner_attempt, row.call_started_at, reason),
      true,
    );
  }
  if (opts.onUnknown === 'recall') return takeOver(0, true);
  const r = await c.query(sql.ownForReconcile(q), [ctx.runId, opts.key, ctx.node, ctx.attempt]);
  if (!r.rows[0]) return thrown(leaseLost(ctx));
  return {
    kind: 'reconcile',
    generation: row.generation,
    callStartedAt: row.call_started_at,
    ownerAttempt: row.owner_attempt,
  };
}
