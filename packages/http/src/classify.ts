/**
 * What an HTTP answer means for the effect, as the IETF Idempotency-Key draft and the presets'
 * documentation describe it, in `@cyclone/idempotency`'s outcome kinds.
 */
import {
  classifyError,
  classifyHttpStatus,
  type Outcome,
  retryAfterMs,
} from '@cyclone/idempotency';
import { HttpResponseError } from './errors.js';
import type { MismatchRule } from './presets.js';

/** The parts of an API's semantics that classification reads (see `HttpPreset`). */
export interface ClassifySemantics {
  conflictStatuses: readonly number[];
  mismatch: MismatchRule | null;
  storesErrors: boolean;
  retryAfterStatuses: readonly number[];
}

/** The draft's semantics: 409 in flight, 422 mismatch, 429/503 with Retry-After a wait. */
export const DRAFT_SEMANTICS: ClassifySemantics = Object.freeze({
  conflictStatuses: [409],
  mismatch: { statuses: [422] },
  storesErrors: false,
  retryAfterStatuses: [429, 503],
});

/**
 * Classifies a failed guarded call. For an `HttpResponseError` (the API answered), in order:
 * 1. a status of `retryAfterStatuses` with a `Retry-After` (or a rate-limit reset header), and
 *    any 429 → `not_sent`, `rateLimited`, with the wait named: the step snoozes, no attempt used;
 * 2. `conflictStatuses` (409) → `conflict`: a request with the key is in flight there;
 * 3. `mismatch` (422; Square: a 4xx about the idempotency key) → `determinism`: non-retryable;
 * 4. a 5xx answering a re-sent key of an API that `storesErrors` → `definitive`: its stored
 *    answer, which will not change;
 * 5. otherwise by status: 408 and 425 → `not_sent`, other 4xx (a 409 outside
 *    `conflictStatuses` included) → `definitive`, 5xx (a 503
 *    without `Retry-After` included) → `ambiguous`.
 * Anything else (refused or reset connections, timeouts, aborts) goes to `classifyError`, which
 * never guesses "not sent".
 */
export function classifyHttpError(
  err: unknown,
  semantics: ClassifySemantics = DRAFT_SEMANTICS,
): Outcome {
  if (!HttpResponseError.isInstance(err)) return classifyError(err);
  const e = err as HttpResponseError;
  const status = e.status;
  const reason = `HTTP ${status}${e.response.statusText ? ` ${e.response.statusText}` : ''}`;
  if (status === 429 || semantics.retryAfterStatuses.includes(status)) {
    const wait = retryAfterMs(e.headers);
    if (status === 429 || wait !== undefined) {
      return {
        kind: 'not_sent',
        status,
        reason,
        rateLimited: true,
        ...(wait !== undefined ? { retryAfterMs: wait } : {}),
      };
    }
  }
  if (semantics.conflictStatuses.includes(status)) {
    return { kind: 'conflict', status, reason: `${reason}: a request with this key is in flight` };
  }
  const m = semantics.mismatch;
  if (m?.statuses.includes(status) && (!m.bodyPattern || m.bodyPattern.test(e.body))) {
    return {
      kind: 'determinism',
      status,
      reason: `${reason}: the API saw this key with another request`,
    };
  }
  if (status >= 500 && e.recall && semantics.storesErrors) {
    return {
      kind: 'definitive',
      status,
      reason: `${reason} again for a re-sent key: the API replays the error it stored under it`,
    };
  }
  // A 409 outside `conflictStatuses` is the API's own conflict (a resource state), not a key.
  if (status === 409) return { kind: 'definitive', status, reason };
  const outcome = classifyHttpStatus(status, e.headers);
  return { ...outcome, reason };
}
