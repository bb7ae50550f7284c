/**
 * `once`: the durable check-then-act guard around one external call.
 * At most one successful call per key; its result is replayed on every later call, whatever its
 * age. The protocol, in short:
 *
 * 1. Claim, committed before the call: insert the key as `started`, owned by `ctx.attempt` (the
 *    fencing token), with `call_started_at` stamped by the same statement that re-checks the
 *    step's fence. An existing row is locked (`FOR UPDATE`, bounded by `lockTimeoutMs`) and
 *    decided on (`once-decide.ts`). No transaction is ever held across the call.
 * 2. Call `fn(key, info)` after a last look at `ctx.signal`.
 * 3. Record the outcome: `succeeded` (on `ctx.completionTx()` with `useCompletionTx`, else
 *    committed at once), or the classified failure — `failed` (definitive), `unknown`
 *    (ambiguous), back to "no call" (not sent; a rate-limit answer snoozes the step,
 *    `RateLimitedError`) — fenced by owner and generation (`once-record.ts`).
 * 4. An unknown outcome left by an earlier attempt waits out the quiet period (the step snoozes,
 *    `InProgressError`), then follows `onUnknown`: `fail`, `recall` or a reconcile function.
 *
 * This file holds `once` itself and the flow between the steps; its options are in
 * `once-options.ts`.
 */
import type { Context, Json } from '@cyclone/core';
import { callDeadlineAt, withCallDeadline } from './deadline.js';
import { IdempotencyConflictError, IdempotencyMismatchError, OutcomeError } from './errors.js';
import { claimKey, type Decision } from './once-decide.js';
import {
  type CallInfo,
  type Normalised,
  normalise,
  type OnceOptions,
  type Reconcile,
  sendKey,
} from './once-options.js';
import {
  type RecordedOnTx,
  recordCallFailure,
  recordReconciledFailure,
  recordSuccess,
  reference,
  resultJson,
  storedFailure,
  writeFailure,
} from './once-record.js';
import { type OnceSpan, onceTracer, tracedOnce } from './once-telemetry.js';
import * as sql from './sql.js';

/** Per-`ctx` memory: same-key calls of one ctx run one after another; completionTx records. */
interface CtxState {
  chains: Map<string, Promise<unknown>>;
  /** Results recorded on this ctx's completionTx. */
  recorded: RecordedOnTx;
}
const states = new WeakMap<Context, CtxState>();

function stateOf(ctx: Context): CtxState {
  let s = states.get(ctx);
  if (!s) {
    s = { chains: new Map(), recorded: new Map() };
    states.set(ctx, s);
  }
  return s;
}

/**
 * Runs the external call `fn` at most once successfully per key, durably:
 * the key is `idempotencyKey(ctx, options.scope)`; a `succeeded` ledger row returns its stored
 * result without calling, on any later attempt and after any time.
 *
 * `fn(key, info)` receives the key to send to the provider: the ledger key, plus `#g<n>` after
 * an operator retry of a definitive failure, bounded to `maxKeyLength` when set. It must return
 * JSON (stored as jsonb); `once` returns the JSON form of the result (`toJson`: a Date becomes
 * its ISO string, `undefined` becomes `null`), the same on the first call and on every replay.
 *
 * Same-key calls on one `ctx` run one after another (the later ones replay the first). Calls on
 * different contexts (or processes) are serialised by the ledger row: one calls, the others get
 * its result or a retryable error.
 *
 * @returns the call's result, or the stored result of an earlier successful call.
 * @throws before anything is written: `IdempotencyKeyError` (bad scope),
 *   `IdempotencyPayloadError` (request not JSON), `IdempotencyUsageError` (bad option).
 * @throws without calling: `IdempotencyMismatchError` (same key, different request;
 *   non-retryable), `DefinitiveFailureError` with `replayed` (non-retryable),
 *   `InProgressError` (an earlier attempt's call may be in flight; a `SnoozeError` until the
 *   quiet period is over),
 *   `UnknownOutcomeError` (policy `fail`; non-retryable), `IdempotencyConflictError` (the key is
 *   busy; retryable), `LeaseLostError` (this attempt was superseded), `ctx.signal`'s reason.
 * @throws after a failed call, by its outcome: `NotSentError` (retryable), `RateLimitedError`
 *   (a 429: a `SnoozeError` for the time the answer named, no attempt used),
 *   `DefinitiveFailureError` (non-retryable), `AmbiguousOutcomeError` (retryable),
 *   `IdempotencyConflictError` (retryable), `IdempotencyMismatchError` (non-retryable); each
 *   has the call's error as `cause`. `IdempotencyPayloadError` when the result is not JSON (the
 *   row is left `unknown`).
 */
export function once<T>(
  ctx: Context,
  options: OnceOptions<T>,
  fn: (key: string, info: CallInfo) => Promise<T>,
): Promise<T> {
  let opts: Normalised<T>;
  try {
    opts = normalise(ctx, options, fn);
  } catch (err) {
    return Promise.reject(err);
  }
  const state = stateOf(ctx);
  const previous = state.chains.get(opts.key);
  const tracer = onceTracer(ctx.client);
  const run = (async () => {
    if (previous) await previous.catch(() => {});
    // A `cyclone.once` span with the ledger's decision, when an SDK registered a tracer.
    return tracer
      ? tracedOnce(tracer, opts, (span) => guarded(ctx, opts, fn, state, span))
      : guarded(ctx, opts, fn, state, undefined);
  })();
  state.chains.set(opts.key, run);
  const cleanup = () => {
    if (state.chains.get(opts.key) === run) state.chains.delete(opts.key);
  };
  run.then(cleanup, cleanup);
  return run;
}

/** The most claim rounds one `once` makes before giving up on a row that keeps changing. */
const MAX_ROUNDS = 8;

async function guarded<T>(
  ctx: Context,
  opts: Normalised<T>,
  fn: (key: string, info: CallInfo) => Promise<T>,
  state: CtxState,
  span: OnceSpan | undefined,
): Promise<T> {
  // Recorded on this ctx's completionTx: not visible to a new connection, and its row is locked
  // by that transaction until the step commits, so answer from memory.
  const mem = state.recorded.get(opts.key);
  if (mem) {
    if (mem.hash !== opts.hash) throw new IdempotencyMismatchError(opts.key, opts.hash, mem.hash);
    span?.decided('replayed');
    return mem.result as T;
  }
  for (let round = 0; round < MAX_ROUNDS; round++) {
    throwIfAborted(ctx);
    let d = await claimKey(ctx, opts);
    let reconciled = false;
    if (d.kind === 'reconcile') {
      d = await reconcile(ctx, opts, d, state);
      reconciled = true;
    }
    if (d.kind === 'again') continue;
    if (d.kind === 'replay') {
      span?.decided(reconciled ? 'reconciled' : 'replayed');
      return d.result as T;
    }
    if (d.kind === 'call') {
      span?.decided('called', d.recall);
      return call(ctx, opts, fn, d, state);
    }
  }
  throw new IdempotencyConflictError(
    opts.key,
    `its ledger row kept changing over ${MAX_ROUNDS} rounds; try again`,
  );
}

function throwIfAborted(ctx: Context): void {
  if (ctx.signal.aborted) throw ctx.signal.reason ?? new Error('aborted');
}

/**
 * Policy "reconcile", outside any transaction: found → record `succeeded` and replay; provably
 * absent → stamp a re-call with the same key; a throw propagates.
 */
async function reconcile<T>(
  ctx: Context,
  opts: Normalised<T>,
  d: Extract<Decision, { kind: 'reconcile' }>,
  state: CtxState,
): Promise<Decision> {
  const policy = opts.onUnknown as Reconcile<T>;
  const key = sendKey(opts, d.generation);
  let found: T | undefined;
  try {
    found = await policy(key, {
      ledgerKey: opts.key,
      key,
      generation: d.generation,
      callStartedAt: d.callStartedAt,
      ownerAttempt: d.ownerAttempt,
      signal: ctx.signal,
    });
  } catch (err) {
    if (!OutcomeError.isInstance(err) || err.outcome?.kind !== 'definitive') throw err;
    throw await recordReconciledFailure(ctx, opts, d.generation, err);
  }
  if (found !== undefined) {
    const result = resultJson(found, ctx.client.maxPayloadBytes);
    return {
      kind: 'replay',
      result: await recordSuccess(
        ctx,
        opts,
        d.generation,
        result,
        reference(ctx, opts, found),
        state.recorded,
      ),
    };
  }
  throwIfAborted(ctx);
  const { pool, q } = ctx.client.db;
  const stampedAt = performance.now();
  const r = await pool.query<{ generation: number; calls: number }>(sql.stampRecall(q), [
    ctx.runId,
    opts.key,
    ctx.node,
    ctx.attempt,
    d.generation,
  ]);
  const t = r.rows[0];
  // The row changed meanwhile (e.g. a zombie recorded its success) or the fence failed: claim
  // again, which sees what happened.
  if (!t) return { kind: 'again' };
  return { kind: 'call', generation: t.generation, calls: t.calls, recall: true, stampedAt };
}

/** Steps 2 and 3: the call, then its recorded outcome. */
async function call<T>(
  ctx: Context,
  opts: Normalised<T>,
  fn: (key: string, info: CallInfo) => Promise<T>,
  d: Extract<Decision, { kind: 'call' }>,
  state: CtxState,
): Promise<T> {
  const { pool, q } = ctx.client.db;
  if (ctx.signal.aborted) {
    // Stamped but not called: say so, so the next attempt need not wait out the quiet period.
    await pool
      .query(sql.unstamp(q), [ctx.runId, opts.key, ctx.attempt, d.generation])
      .catch(() => {});
    throwIfAborted(ctx);
  }
  const key = sendKey(opts, d.generation);
  let raw: T;
  const info: CallInfo = {
    ledgerKey: opts.key,
    key,
    generation: d.generation,
    call: d.calls,
    recall: d.recall,
    signal: ctx.signal,
  };
  try {
    // Requests made through a deadline agent must leave within the quiet period counted from the
    // ledger's stamp, however long this worker took to hear that the stamp committed.
    raw = await withCallDeadline(callDeadlineAt(d.stampedAt, opts.quietPeriodMs), () =>
      fn(key, info),
    );
  } catch (err) {
    throw await recordCallFailure(ctx, opts, d.generation, err, d.calls);
  }
  let result: Json;
  try {
    result = resultJson(raw, ctx.client.maxPayloadBytes);
  } catch (err) {
    // The effect happened but its result cannot be kept: leave evidence, as an unknown outcome.
    const failure = storedFailure(err, { kind: 'ambiguous', reason: 'result not storable' });
    await writeFailure(ctx, opts, d.generation, 'unknown', failure, true);
    throw err;
  }
  return (await recordSuccess(
    ctx,
    opts,
    d.generation,
    result,
    reference(ctx, opts, raw),
    state.recorded,
  )) as T;
}
