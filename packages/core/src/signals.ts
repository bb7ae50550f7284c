/**
 * `Client.signal`: a durable signal for a run, stored whatever the run's progress (the first one
 * of a name per run stands), which a wait node of that name completes with.
 */
import { type Db, withTransactionRetried } from './db.js';
import { InvalidSignalError, InvalidStateError, PayloadError, RunNotFoundError } from './errors.js';
import { isUuid } from './inspect.js';
import { encodePayload } from './json.js';
import { isSignalName, MAX_SIGNAL_NAME_LENGTH } from './signal-name.js';
import { insertSignal } from './sql/signals.js';
import type { Tx } from './types.js';

/** Options of `Client.signal`. */
export interface SignalOptions {
  /**
   * Send inside the caller's transaction: the signal exists only if that transaction commits.
   * Anything with pg's `query` (a `PoolClient` after BEGIN, a `Tx`).
   */
  tx?: Tx;
}

/** Result of `Client.signal`. */
export interface SignalResult {
  /** False when the run had a signal of that name already (the first one stands). */
  accepted: boolean;
  /**
   * The run's wait nodes of this name that wait, or will wait, for it (not yet finished), by
   * name. Empty when none does — a misspelt name, a node removed from the workflow, or a wait
   * node that has already completed or timed out: the signal is stored all the same and changes
   * nothing.
   */
  waitingNodes: string[];
}

/** What sending a signal needs of the client: its database handle and payload limit. */
export interface SignalScope {
  readonly db: Db;
  readonly maxPayloadBytes: number;
}

/**
 * Stores signal `name` with `payload` for run `runId`; see `Client.signal`.
 * @throws InvalidSignalError for a bad name or a payload that is not storable JSON or over the
 *   payload limit; RunNotFoundError; InvalidStateError when the run is finished. Nothing is
 *   written then.
 */
export async function signal(
  scope: SignalScope,
  runId: string,
  name: string,
  payload: unknown,
  options: SignalOptions = {},
): Promise<SignalResult> {
  if (!isSignalName(name)) {
    throw new InvalidSignalError(
      String(runId),
      String(name),
      `a signal name is 1 to ${MAX_SIGNAL_NAME_LENGTH} characters without NUL or lone surrogates`,
    );
  }
  if (!isUuid(runId)) throw new RunNotFoundError(String(runId));
  let text: string;
  try {
    text = encodePayload(
      payload === undefined ? null : payload,
      scope.maxPayloadBytes,
      'the signal payload',
    ).text;
  } catch (err) {
    if (err instanceof PayloadError) throw new InvalidSignalError(runId, name, err.message);
    throw err;
  }
  const { tx } = options;
  const values = { runId, name, payload: text };
  const r = tx ? await insertSignal(tx, scope.db, values) : await inOwnTransaction(scope, values);
  if (r.run_state === null) throw new RunNotFoundError(runId);
  if (r.run_state !== 'running') {
    throw new InvalidStateError(
      runId,
      undefined,
      r.run_state,
      `run ${runId} is ${r.run_state}; a signal is only taken by a running run`,
    );
  }
  return { accepted: r.accepted, waitingNodes: r.waiting };
}

/**
 * `insertSignal` in a transaction of its own, run again (up to 5 times) when PostgreSQL rolled
 * it back for a deadlock or a serialization failure. Not after a connection error: the signal
 * may have been stored then, and a second try would answer `accepted: false` for it.
 */
async function inOwnTransaction(
  scope: SignalScope,
  values: { runId: string; name: string; payload: string },
) {
  return withTransactionRetried(scope.db.pool, (c) => insertSignal(c, scope.db, values));
}
