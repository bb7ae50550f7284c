/**
 * Step 3 of `once`'s protocol, recording a call's outcome on its ledger row: a success (on the
 * step's completionTx, or committed at once), or a classified failure, fenced by owner and
 * generation; and what the ledger keeps of a result and of an error.
 */
import { type Context, type Json, PayloadError } from '@cyclone/core';
import { isConnectionError, redactSecrets, storableText, toJson } from '@cyclone/core/internal';
import {
  AmbiguousOutcomeError,
  DefinitiveFailureError,
  IdempotencyConflictError,
  IdempotencyMismatchError,
  IdempotencyPayloadError,
  NotSentError,
  type OutcomeError,
  RateLimitedError,
  type StoredFailure,
} from './errors.js';
import { leaseLost } from './once-decide.js';
import type { Normalised } from './once-options.js';
import { classifyError, isOutcome, type Outcome } from './outcome.js';
import { rateLimitBackoffMs } from './retry-after.js';
import * as sql from './sql.js';

/** Results recorded on a ctx's completionTx (not visible to other connections yet), by key. */
export type RecordedOnTx = Map<string, { hash: string; result: Json }>;

/** The provider reference of a result, by `options.reference`; a throw there is only logged. */
export function reference<T>(ctx: Context, opts: Normalised<T>, raw: T): string | null {
  if (!opts.reference) return null;
  try {
    const ref = opts.reference(raw);
    return typeof ref === 'string' ? ref.replaceAll('\u0000', '') : null;
  } catch (err) {
    ctx.log.warn({ err: String(err), key: opts.key }, 'options.reference threw; no provider_ref');
    return null;
  }
}

/** A call's result as JSON within the client's payload limit. */
export function resultJson(raw: unknown, maxBytes: number): Json {
  let json: Json;
  try {
    json = toJson(raw === undefined ? null : raw);
  } catch (err) {
    if (err instanceof PayloadError) {
      throw new IdempotencyPayloadError(
        'result',
        err.message.replace(/ at \S+$/, ''),
        err.path,
        err,
      );
    }
    throw err;
  }
  const bytes = Buffer.byteLength(JSON.stringify(json), 'utf8');
  if (bytes > maxBytes) {
    throw new IdempotencyPayloadError(
      'result',
      `it is ${bytes} bytes of JSON, over the limit of ${maxBytes} bytes`,
      '$',
    );
  }
  return json;
}

/**
 * Records `succeeded` (step 3): on the step's completionTx with `useCompletionTx`, else
 * committed now (retrying a lost connection for a few seconds). When the row already has an
 * outcome (a newer attempt recorded one), a stored success is returned; anything else means this
 * attempt was superseded.
 */
export async function recordSuccess<T>(
  ctx: Context,
  opts: Normalised<T>,
  generation: number,
  result: Json,
  ref: string | null,
  recorded: RecordedOnTx,
): Promise<Json> {
  const { pool, q } = ctx.client.db;
  const params = [ctx.runId, opts.key, generation, JSON.stringify(result), ref];
  if (opts.useCompletionTx) {
    const tx = await ctx.completionTx();
    const r = await tx.query(sql.recordSucceeded(q), params);
    if (!r.rows[0]) throw leaseLost(ctx);
    recorded.set(opts.key, { hash: opts.hash, result });
    return result;
  }
  const r = await withDbRetry(() => pool.query(sql.recordSucceeded(q), params));
  if (r.rows[0]) return result;
  const now = await pool.query<{ phase: string; request_hash: string; result: Json }>(
    sql.selectRow(q),
    [ctx.runId, opts.key],
  );
  const row = now.rows[0];
  if (row?.phase === 'succeeded' && row.request_hash === opts.hash) return row.result;
  throw leaseLost(ctx);
}

/**
 * Classifies a failed call, records it (fenced) and returns the typed error to throw. `call` is
 * the number of calls made under the key so far, this one included (the rate-limit backoff).
 */
export async function recordCallFailure<T>(
  ctx: Context,
  opts: Normalised<T>,
  generation: number,
  err: unknown,
  call: number,
): Promise<Error> {
  let outcome: Outcome | undefined;
  try {
    outcome = opts.classify?.(err);
  } catch (e) {
    ctx.log.warn({ err: String(e), key: opts.key }, 'options.classify threw; using classifyError');
  }
  if (!isOutcome(outcome)) outcome = classifyError(err);
  const failure = storedFailure(err, outcome);
  const reason = outcome.reason ?? failure.message;
  switch (outcome.kind) {
    case 'not_sent':
      await writeFailure(ctx, opts, generation, 'started', failure, false);
      if (outcome.rateLimited === true) {
        const named = outcome.retryAfterMs;
        const valid = typeof named === 'number' && Number.isFinite(named) && named >= 0;
        return new RateLimitedError(
          opts.key,
          valid ? outcome : { ...outcome, retryAfterMs: undefined },
          valid ? named : rateLimitBackoffMs(call),
          err,
        );
      }
      return new NotSentError(opts.key, outcome, err);
    case 'definitive':
      await writeFailure(ctx, opts, generation, 'failed', failure, true);
      return new DefinitiveFailureError(opts.key, generation, failure, false, err);
    case 'conflict':
      // Something with this key is in progress at the provider: keep the call stamp, so the
      // next attempt treats it as in flight.
      await writeFailure(ctx, opts, generation, 'started', failure, true);
      return new IdempotencyConflictError(
        opts.key,
        `the provider reports a request with this key in progress (${reason})`,
        err,
      );
    case 'determinism':
      await writeFailure(ctx, opts, generation, 'failed', failure, true);
      return new IdempotencyMismatchError(
        opts.key,
        opts.hash,
        undefined,
        `the provider rejected the key: ${reason}`,
        err,
      );
    default:
      await writeFailure(ctx, opts, generation, 'unknown', failure, true);
      return new AmbiguousOutcomeError(opts.key, outcome, err);
  }
}

/**
 * The reconcile function found the call's trace of failure: records `failed` (fenced by this
 * attempt's ownership) and returns the `DefinitiveFailureError` to throw. A lost fence returns
 * `LeaseLostError`: a newer attempt owns the key and decides again.
 */
export async function recordReconciledFailure<T>(
  ctx: Context,
  opts: Normalised<T>,
  generation: number,
  err: OutcomeError,
): Promise<Error> {
  const failure = storedFailure(err, err.outcome);
  const { pool, q } = ctx.client.db;
  const r = await withDbRetry(() =>
    pool.query(sql.recordReconciledFailure(q), [
      ctx.runId,
      opts.key,
      ctx.node,
      ctx.attempt,
      generation,
      JSON.stringify(failure),
    ]),
  );
  if (!r.rows[0]) return leaseLost(ctx);
  return new DefinitiveFailureError(opts.key, generation, failure, false, err);
}

/** Writes a failure outcome, fenced by owner and generation; a database error is only logged. */
export async function writeFailure<T>(
  ctx: Context,
  opts: Normalised<T>,
  generation: number,
  phase: 'started' | 'failed' | 'unknown',
  failure: StoredFailure,
  keepStamp: boolean,
): Promise<void> {
  const { pool, q } = ctx.client.db;
  try {
    const r = await withDbRetry(() =>
      pool.query(sql.recordFailure(q), [
        ctx.runId,
        opts.key,
        ctx.attempt,
        generation,
        phase,
        JSON.stringify(failure),
        keepStamp,
      ]),
    );
    if (!r.rows[0]) {
      ctx.log.warn(
        { key: opts.key, outcome: failure.outcome },
        'outcome not recorded: the key has a newer owner or outcome',
      );
    }
  } catch (err) {
    ctx.log.error(
      { err: String(err), key: opts.key, outcome: failure.outcome },
      'could not record the outcome of a call; the row stays started (an unknown outcome)',
    );
  }
}

/** What the ledger keeps of an error (see `StoredFailure`). */
export function storedFailure(err: unknown, outcome: Outcome): StoredFailure {
  const e = (typeof err === 'object' && err !== null ? err : {}) as Record<string, unknown>;
  // Secrets redacted before the cut, so that no part of one is stored (core's redactSecrets).
  // storableText also repairs a surrogate pair cut in two, which jsonb would refuse.
  const clean = (s: string) => storableText(redactSecrets(s.replaceAll('\u0000', '')), 2000);
  const message =
    err instanceof Error ? err.message || err.name : typeof err === 'string' ? err : String(err);
  const code = outcome.code ?? (typeof e.code === 'string' ? e.code : undefined);
  const status =
    outcome.status ??
    (typeof e.status === 'number'
      ? e.status
      : typeof e.statusCode === 'number'
        ? e.statusCode
        : undefined);
  return {
    name: clean(err instanceof Error ? err.name : typeof err),
    message: clean(message),
    ...(code !== undefined ? { code: clean(code) } : {}),
    ...(status !== undefined && Number.isFinite(status) ? { status } : {}),
    outcome: outcome.kind,
    ...(outcome.reason !== undefined ? { reason: clean(outcome.reason) } : {}),
    at: new Date().toISOString(),
  };
}

/** Retries `fn` on connection errors: 5 tries over about 1.5 s. */
async function withDbRetry<R>(fn: () => Promise<R>): Promise<R> {
  for (let i = 0; ; i++) {
    try {
      return await fn();
    } catch (err) {
      if (!isConnectionError(err) || i >= 4) throw err;
      await new Promise((r) => setTimeout(r, 100 * 2 ** i));
    }
  }
}
