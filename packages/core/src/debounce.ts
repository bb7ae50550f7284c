/**
 * Debounce (`Client.submit` with `{ debounce }`): the transaction that either absorbs a submit
 * into the open run of its (workflow, key) or creates that run. The database decides who wins:
 * the run's row lock serializes the submitters of one key, and the partial unique index on
 * (workflow, debounce_key) lets exactly one run hold the key, so no advisory lock and no
 * worker's memory takes part.
 */
import { type Db, withTransaction } from './db.js';
import {
  absorbDebounced,
  type DebounceWindow,
  insertDebouncedRun,
  lockDebouncedRun,
} from './sql/debounce.js';
import type { Queryable } from './sql/statement.js';
import type { StepColumns } from './sql/submit.js';
import type { DebouncedSubmitResult, Tx } from './types.js';

/**
 * Rounds of lock-or-insert before giving up. Each round that neither absorbs nor inserts saw
 * another submit's run take the key in between, so a second round settles it unless runs of
 * the key keep starting at that very moment.
 */
const MAX_ROUNDS = 10;

/** One debounced submit, validated and encoded (`submit.ts`). */
export interface DebouncedSubmit {
  workflow: string;
  /** The id the run gets if this submit creates it. */
  runId: string;
  key: string;
  /** The run input as JSON text, and its hash. */
  input: string;
  inputHash: string;
  steps: StepColumns;
  window: DebounceWindow;
  /** The submit span's W3C traceparent, stored with the run if this submit creates it. */
  traceparent: string | null;
  /** The run's priority if this submit creates it (a run absorbing the submit keeps its own). */
  priority: number;
}

/**
 * Submits `p` debounced, in the caller's transaction `tx` (READ COMMITTED, the default: under
 * REPEATABLE READ a concurrent submit of the key fails this one with a serialization error) or
 * in one of its own.
 */
export function submitDebounced(
  db: Db,
  p: DebouncedSubmit,
  tx: Tx | undefined,
): Promise<DebouncedSubmitResult> {
  if (tx) return debounceOn(tx, db, p, true);
  return withTransaction(db.pool, (c) => debounceOn(c, db, p, false));
}

/**
 * In one transaction: (1) lock the run holding the key; (2) if there is one, absorb the submit
 * when none of its roots started, else take the key off it; (3) insert a run holding the key,
 * and when another submit's run got it first (the insert waited for that one to commit), go
 * back to (1) and join that run.
 */
async function debounceOn(
  on: Queryable,
  db: Db,
  p: DebouncedSubmit,
  plainText: boolean,
): Promise<DebouncedSubmitResult> {
  for (let round = 0; round < MAX_ROUNDS; round++) {
    const open = await lockDebouncedRun(on, db, { workflow: p.workflow, key: p.key }, plainText);
    if (open !== undefined && (await absorbDebounced(on, db, { ...p, runId: open }, plainText))) {
      return { runId: open, debounced: true };
    }
    if (await insertDebouncedRun(on, db, p, plainText)) {
      return { runId: p.runId, debounced: false };
    }
  }
  throw new Error(
    `submit(${p.workflow}, { debounce }): the key's run kept changing under ${MAX_ROUNDS} tries; try again`,
  );
}
