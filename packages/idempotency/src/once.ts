/**
 * `once`: the durable check-then-act guard around one external call (PROVIDERS.md § 4.2).
 * At most one successful call per key; its result is replayed on every later call, whatever its
 * age. The protocol, in short:
 *
 * 1. Claim, committed before the call: insert the key as `started`, owned by `ctx.attempt` (the
 *    fencing token), with `call_started_at` stamped by the same statement that re-checks the
 *    step's fence. An existing row is locked (`FOR UPDATE`, bounded by `lockTimeoutMs`) and
 *    branched on (see `claim`). No transaction is ever held across the call.
 * 2. Call `fn(key, info)` after a last look at `ctx.signal`.
 * 3. Record the outcome: `succeeded` (on `ctx.completionTx()` with `useCompletionTx`, else
 *    committed at once), or the classified failure — `failed` (definitive), `unknown`
 *    (ambiguous), back to "no call" (not sent) — fenced by owner and generation.
 * 4. An unknown outcome left by an earlier attempt waits out the quiet period (retryable
 *    `InProgressError`), then follows `onUnknown`: `fail`, `recall` or a reconcile function.
 */
import { type Context, type Json, LeaseLostError, PayloadError } from '@cyclone/core';
import {
  hashJson,
  isConnectionError,
  redactSecrets,
  selectStepHeld,
  storableText,
  toJson,
} from '@cyclone/core/internal';
import {
  AmbiguousOutcomeError,
  DefinitiveFailureError,
  IdempotencyConflictError,
  IdempotencyMismatchError,
  IdempotencyPayloadError,
  IdempotencyUsageError,
  InProgressError,
  NotSentError,
  type StoredFailure,
  UnknownOutcomeError,
} from './errors.js';
import { boundKey, idempotencyKey, nativeKey } from './key.js';
import { classifyError, isOutcome, type Outcome } from './outcome.js';
import * as sql from './sql.js';

/** Default quiet period: 60,000 ms (see `OnceOptions.quietPeriodMs`). */
export const DEFAULT_QUIET_PERIOD_MS = 60_000;

/** Default bound on waiting for a locked ledger row: 2,000 ms. */
export const DEFAULT_LOCK_TIMEOUT_MS = 2_000;

/** What a guarded call receives besides its key. */
export interface CallInfo {
  /** The ledger key `${runId}:${node}[:${scope}]`: never bounded, never with a generation. */
  readonly ledgerKey: string;
  /** The key to send to the provider (also `fn`'s first argument): see `once`. */
  readonly key: string;
  /** The ledger generation (0 until an operator retry after a definitive failure). */
  readonly generation: number;
  /** Calls let through for this key so far, this one included (1 on the first call). */
  readonly call: number;
  /**
   * True when an earlier call under this key has an unknown outcome (policy `recall`, or a
   * reconcile that found nothing): the provider may already have this request.
   */
  readonly recall: boolean;
  /** `ctx.signal`: pass it to fetch or the SDK. */
  readonly signal: AbortSignal;
}

/** What a reconcile function receives besides the key (`fn`'s key: bounded, with generation). */
export interface ReconcileInfo {
  readonly ledgerKey: string;
  readonly key: string;
  readonly generation: number;
  /** When the call with the unknown outcome was let through (database clock); null if never. */
  readonly callStartedAt: Date | null;
  /** The attempt that made it. */
  readonly ownerAttempt: number;
  readonly signal: AbortSignal;
}

/**
 * A reconcile function: looks the effect up at the provider by the key (a metadata search, a
 * callback table, a list call).
 * - resolves with the call's result (the same shape `fn` returns) when the effect is found →
 *   recorded `succeeded`, returned, no call;
 * - resolves `undefined` when the effect is provably absent → called again with the same key;
 * - throws when it cannot tell: a `NonRetryableError` (e.g. `UnknownOutcomeError`) discards the
 *   step for an operator; any other error retries the step later, reconciling again.
 */
export type Reconcile<T> = (key: string, info: ReconcileInfo) => Promise<T | undefined>;

/**
 * What to do with an unknown outcome once the quiet period is over (PROVIDERS.md § 4.2, 4):
 * - `'fail'` (default): discard the step with `UnknownOutcomeError` for an operator: at most
 *   once, never a duplicate, but a human decides;
 * - `'recall'`: call again with the same key: right when the provider deduplicates by key
 *   (Stripe within 24 h), at-least-once otherwise;
 * - a reconcile function (see `Reconcile`).
 */
export type UnknownPolicy<T> = 'fail' | 'recall' | Reconcile<T>;

/** Options of `once`. Durations are in milliseconds. */
export interface OnceOptions<T> {
  /** One per distinct external call of the handler; the key is `${runId}:${node}:${scope}`. */
  scope?: string;
  /**
   * The call's parameters, as JSON (use `null` for none). Hashed canonically (with `provider` and
   * `operation`); the same key with another request is an `IdempotencyMismatchError`.
   */
  request: unknown;
  /** The unknown-outcome policy. Default `'fail'`. */
  onUnknown?: UnknownPolicy<NoInfer<T>>;
  /**
   * How long after a call was let through its outcome may still arrive — the call's worst-case
   * duration (timeout × (retries + 1) + backoff; PROVIDERS.md § 4.2). Within it, an unknown
   * outcome left by an earlier attempt is "in progress" (retryable `InProgressError`), never
   * called over. Default `DEFAULT_QUIET_PERIOD_MS` (60 s: enough for a call with a 30 s timeout
   * and one retry). Set it per provider; keep per-call timeouts below it.
   */
  quietPeriodMs?: number;
  /**
   * Classifies a failed call; return `undefined` to fall back to `classifyError`. Adapters pass
   * their provider's table (PROVIDERS.md § 4.2).
   */
  classify?: (err: unknown) => Outcome | undefined;
  /** Label stored with the row and hashed with the request, e.g. `stripe`. */
  provider?: string;
  /** Label stored with the row and hashed with the request, e.g. `POST /v1/refunds`. */
  operation?: string;
  /**
   * Record `succeeded` on `ctx.completionTx()` (opened after the call if the handler has not
   * opened it), so the ledger row and the step's completion commit together or not at all.
   * Default false: `succeeded` is committed on its own right after the call, so it survives a
   * crash before the step completes (the next attempt replays it with no call). With true, such
   * a crash leaves the row `started` — an unknown outcome for the policy — so use it with a
   * provider that deduplicates by key and `onUnknown: 'recall'`, or a reconcile function.
   */
  useCompletionTx?: boolean;
  /** The provider's key length limit: the key given to `fn` is `boundKey`-ed to it (≥ 67). */
  maxKeyLength?: number;
  /**
   * Extracts the provider's reference (`pi_…`, `SM…`) from the result, stored as `provider_ref`.
   * Annotate its parameter (`(r: Charge) => r.id`): TypeScript infers the result type from `fn`,
   * which comes after the options, so an unannotated parameter would be `unknown`.
   */
  reference?: (result: T) => string | null | undefined;
  /** Longest wait for a ledger row locked by another transaction, then a retryable conflict. */
  lockTimeoutMs?: number;
}

interface Normalised<T> {
  key: string;
  scope: string | null;
  hash: string;
  onUnknown: UnknownPolicy<T>;
  quietPeriodMs: number;
  classify: ((err: unknown) => Outcome | undefined) | undefined;
  provider: string | null;
  operation: string | null;
  useCompletionTx: boolean;
  maxKeyLength: number | undefined;
  reference: ((result: T) => string | null | undefined) | undefined;
  lockTimeoutMs: number;
}

/** Per-`ctx` memory: same-key calls of one ctx run one after another; completionTx records. */
interface CtxState {
  chains: Map<string, Promise<unknown>>;
  /** Results recorded on this ctx's completionTx (not visible to other connections yet). */
  recorded: Map<string, { hash: string; result: Json }>;
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
 * Runs the external call `fn` at most once successfully per key, durably (PROVIDERS.md § 4.2):
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
 *   `InProgressError` (an earlier attempt's call may be in flight; retryable),
 *   `UnknownOutcomeError` (policy `fail`; non-retryable), `IdempotencyConflictError` (the key is
 *   busy; retryable), `LeaseLostError` (this attempt was superseded), `ctx.signal`'s reason.
 * @throws after a failed call, by its outcome: `NotSentError` (retryable),
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
  const run = (async () => {
    if (previous) await previous.catch(() => {});
    return guarded(ctx, opts, fn, state);
  })();
  state.chains.set(opts.key, run);
  const cleanup = () => {
    if (state.chains.get(opts.key) === run) state.chains.delete(opts.key);
  };
  run.then(cleanup, cleanup);
  return run;
}

function normalise<T>(
  ctx: Context,
  options: OnceOptions<T>,
  fn: (key: string, info: CallInfo) => Promise<T>,
): Normalised<T> {
  if (!ctx || typeof ctx !== 'object' || !ctx.client || typeof ctx.attempt !== 'number') {
    throw new IdempotencyUsageError('once() needs the handler ctx as its first argument');
  }
  if (!options || typeof options !== 'object') {
    throw new IdempotencyUsageError('once() needs options ({ request, ... })');
  }
  if (typeof fn !== 'function') {
    throw new IdempotencyUsageError('once() needs the call as a function (key, info) => result');
  }
  const key = idempotencyKey(ctx, options.scope);
  const onUnknown = options.onUnknown ?? 'fail';
  if (onUnknown !== 'fail' && onUnknown !== 'recall' && typeof onUnknown !== 'function') {
    throw new IdempotencyUsageError(
      `onUnknown must be 'fail', 'recall' or a reconcile function, got ${JSON.stringify(onUnknown)}`,
    );
  }
  const quietPeriodMs = options.quietPeriodMs ?? DEFAULT_QUIET_PERIOD_MS;
  if (typeof quietPeriodMs !== 'number' || !Number.isFinite(quietPeriodMs) || quietPeriodMs < 0) {
    throw new IdempotencyUsageError(
      `quietPeriodMs must be a finite number ≥ 0, got ${quietPeriodMs}`,
    );
  }
  const lockTimeoutMs = options.lockTimeoutMs ?? DEFAULT_LOCK_TIMEOUT_MS;
  if (!Number.isInteger(lockTimeoutMs) || lockTimeoutMs < 1) {
    throw new IdempotencyUsageError(`lockTimeoutMs must be an integer ≥ 1, got ${lockTimeoutMs}`);
  }
  if (options.classify !== undefined && typeof options.classify !== 'function') {
    throw new IdempotencyUsageError('classify must be a function (err) => Outcome | undefined');
  }
  if (options.reference !== undefined && typeof options.reference !== 'function') {
    throw new IdempotencyUsageError('reference must be a function (result) => string');
  }
  for (const name of ['provider', 'operation'] as const) {
    const v = options[name];
    if (v !== undefined && (typeof v !== 'string' || v.length === 0 || v.length > 200)) {
      throw new IdempotencyUsageError(`${name} must be a string of 1 to 200 characters`);
    }
  }
  if (options.maxKeyLength !== undefined) boundKey(key, options.maxKeyLength); // validates
  if (!('request' in options) || options.request === undefined) {
    throw new IdempotencyPayloadError(
      'request',
      'options.request is required (use null for a call without parameters)',
      '$',
    );
  }
  let request: Json;
  try {
    request = toJson(options.request);
  } catch (err) {
    if (err instanceof PayloadError) {
      throw new IdempotencyPayloadError(
        'request',
        err.message.replace(/ at \S+$/, ''),
        err.path,
        err,
      );
    }
    throw err;
  }
  const provider = options.provider ?? null;
  const operation = options.operation ?? null;
  return {
    key,
    scope: options.scope ?? null,
    hash: hashJson({ provider, operation, request }),
    onUnknown,
    quietPeriodMs,
    classify: options.classify,
    provider,
    operation,
    useCompletionTx: options.useCompletionTx === true,
    maxKeyLength: options.maxKeyLength,
    reference: options.reference,
    lockTimeoutMs,
  };
}

/** What the claim decided. */
type Decision =
  | { kind: 'replay'; result: Json }
  | { kind: 'call'; generation: number; calls: number; recall: boolean }
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

/** The most claim rounds one `once` makes before giving up on a row that keeps changing. */
const MAX_ROUNDS = 8;

async function guarded<T>(
  ctx: Context,
  opts: Normalised<T>,
  fn: (key: string, info: CallInfo) => Promise<T>,
  state: CtxState,
): Promise<T> {
  // Recorded on this ctx's completionTx: not visible to a new connection, and its row is locked
  // by that transaction until the step commits, so answer from memory.
  const mem = state.recorded.get(opts.key);
  if (mem) {
    if (mem.hash !== opts.hash) throw new IdempotencyMismatchError(opts.key, opts.hash, mem.hash);
    return mem.result as T;
  }
  for (let round = 0; round < MAX_ROUNDS; round++) {
    throwIfAborted(ctx);
    let d = await claim(ctx, opts);
    if (d.kind === 'reconcile') d = await reconcile(ctx, opts, d, state);
    if (d.kind === 'again') continue;
    if (d.kind === 'replay') return d.result as T;
    if (d.kind === 'call') return call(ctx, opts, fn, d, state);
  }
  throw new IdempotencyConflictError(
    opts.key,
    `its ledger row kept changing over ${MAX_ROUNDS} rounds; try again`,
  );
}

function throwIfAborted(ctx: Context): void {
  if (ctx.signal.aborted) throw ctx.signal.reason ?? new Error('aborted');
}

function leaseLost(ctx: Context): LeaseLostError {
  return new LeaseLostError(ctx.runId, ctx.node, ctx.attempt);
}

/** The key `fn` and a reconcile function get: generation suffix, then the provider's bound. */
function sendKey<T>(opts: Normalised<T>, generation: number): string {
  const k = nativeKey(opts.key, generation);
  return opts.maxKeyLength === undefined ? k : boundKey(k, opts.maxKeyLength);
}

/** Step 1 of the protocol: the fast insert, else the branch on the locked existing row. */
async function claim<T>(ctx: Context, opts: Normalised<T>): Promise<Decision> {
  const { pool, q } = ctx.client;
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
    return { kind: 'call', generation: first.generation, calls: first.calls, recall: false };
  }
  // A success is final: replay it without locking. Anything else takes the locked path.
  if (first?.phase === 'succeeded' && first.request_hash === opts.hash) {
    return { kind: 'replay', result: first.result };
  }

  const c = await pool.connect();
  let result: Decision | Thrown;
  try {
    await c.query('BEGIN');
    await c.query(`SELECT set_config('lock_timeout', $1, true)`, [`${opts.lockTimeoutMs}ms`]);
    const { rows } = await c.query<LockedRow>(sql.lockRow(q), [ctx.runId, opts.key, ctx.attempt]);
    const row = rows[0];
    if (row) {
      result = await branch(ctx, opts, row, c);
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
    c.release(isConnectionError(err) ? (err as Error) : undefined);
    if ((err as { code?: unknown })?.code === '55P03') {
      throw new IdempotencyConflictError(
        opts.key,
        `its ledger row stayed locked for more than ${opts.lockTimeoutMs} ms (another attempt is recording an outcome)`,
        err,
      );
    }
    throw err;
  }
  c.release();
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
 * The branch on an existing row (PROVIDERS.md § 4.2, step 1), inside the claim transaction with
 * the row locked:
 * - another request hash → `IdempotencyMismatchError`;
 * - `succeeded` → replay the stored result;
 * - owned by a newer attempt → this attempt is a zombie: `LeaseLostError`;
 * - `failed` → replay the definitive error, unless this attempt comes from an operator retry
 *   (core's `reopened_after_attempt` on the step is ≥ the owner's attempt and < this one):
 *   then generation + 1 and call;
 * - `started` with no call stamped (claimed, nothing sent; or not sent) → take over and call;
 * - `started` with a call by this same attempt → `IdempotencyConflictError`;
 * - otherwise an unknown outcome: within the quiet period `InProgressError`, after it the policy.
 */
async function branch<T>(
  ctx: Context,
  opts: Normalised<T>,
  row: LockedRow,
  c: Queryable,
): Promise<Decision | Thrown> {
  const { q } = ctx.client;
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
      ? { kind: 'call', generation: t.generation, calls: t.calls, recall }
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

  // An unknown outcome: `unknown`, or `started` with a call by an earlier attempt.
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
  const found = await policy(key, {
    ledgerKey: opts.key,
    key,
    generation: d.generation,
    callStartedAt: d.callStartedAt,
    ownerAttempt: d.ownerAttempt,
    signal: ctx.signal,
  });
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
        state,
      ),
    };
  }
  throwIfAborted(ctx);
  const { pool, q } = ctx.client;
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
  return { kind: 'call', generation: t.generation, calls: t.calls, recall: true };
}

/** Steps 2 and 3: the call, then its recorded outcome. */
async function call<T>(
  ctx: Context,
  opts: Normalised<T>,
  fn: (key: string, info: CallInfo) => Promise<T>,
  d: Extract<Decision, { kind: 'call' }>,
  state: CtxState,
): Promise<T> {
  const { pool, q } = ctx.client;
  if (ctx.signal.aborted) {
    // Stamped but not called: say so, so the next attempt need not wait out the quiet period.
    await pool
      .query(sql.unstamp(q), [ctx.runId, opts.key, ctx.attempt, d.generation])
      .catch(() => {});
    throwIfAborted(ctx);
  }
  const key = sendKey(opts, d.generation);
  let raw: T;
  try {
    raw = await fn(key, {
      ledgerKey: opts.key,
      key,
      generation: d.generation,
      call: d.calls,
      recall: d.recall,
      signal: ctx.signal,
    });
  } catch (err) {
    throw await recordCallFailure(ctx, opts, d.generation, err);
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
    state,
  )) as T;
}

/** The provider reference of a result, by `options.reference`; a throw there is only logged. */
function reference<T>(ctx: Context, opts: Normalised<T>, raw: T): string | null {
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
function resultJson(raw: unknown, maxBytes: number): Json {
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
async function recordSuccess<T>(
  ctx: Context,
  opts: Normalised<T>,
  generation: number,
  result: Json,
  ref: string | null,
  state: CtxState,
): Promise<Json> {
  const { pool, q } = ctx.client;
  const params = [ctx.runId, opts.key, generation, JSON.stringify(result), ref];
  if (opts.useCompletionTx) {
    const tx = await ctx.completionTx();
    const r = await tx.query(sql.recordSucceeded(q), params);
    if (!r.rows[0]) throw leaseLost(ctx);
    state.recorded.set(opts.key, { hash: opts.hash, result });
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

/** Classifies a failed call, records it (fenced) and returns the typed error to throw. */
async function recordCallFailure<T>(
  ctx: Context,
  opts: Normalised<T>,
  generation: number,
  err: unknown,
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

/** Writes a failure outcome, fenced by owner and generation; a database error is only logged. */
async function writeFailure<T>(
  ctx: Context,
  opts: Normalised<T>,
  generation: number,
  phase: 'started' | 'failed' | 'unknown',
  failure: StoredFailure,
  keepStamp: boolean,
): Promise<void> {
  const { pool, q } = ctx.client;
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
function storedFailure(err: unknown, outcome: Outcome): StoredFailure {
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
