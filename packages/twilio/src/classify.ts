/**
 * What a failed `messages.create` means for the message, by what Twilio documents of each answer.
 * The SDK rejects with one of three shapes:
 * - `RestException` (legacy body) or `TwilioServiceException` (RFC 9457 body): `status` is the HTTP
 *   status, `code` Twilio's error code (21211, 20503, …);
 * - a raw `AxiosError` (`isAxiosError`): a transport failure, `code` `ECONNREFUSED`, `ECONNRESET`,
 *   `ECONNABORTED` (timeout), …;
 * - any other error: thrown by the SDK before any request (a required parameter missing).
 */
import {
  classifyError,
  classifyHttpStatus,
  type Outcome,
  type ResponseHeaders,
} from '@cyclone/idempotency';

/** The shape shared by `RestException` and `TwilioServiceException`. */
interface TwilioHttpError {
  status: number;
  code?: number;
  message: string;
}

/** True for the SDK's `RestException` / `TwilioServiceException` (Twilio answered ≥ 400). */
export function isTwilioHttpError(err: unknown): err is TwilioHttpError {
  const e = err as Partial<TwilioHttpError> | null;
  return (
    typeof e === 'object' &&
    e !== null &&
    typeof e.status === 'number' &&
    (e as { isAxiosError?: unknown }).isAxiosError !== true
  );
}

/**
 * Classifies a failed create:
 * - 4xx with a Twilio code (21211 invalid To, 21610 unsubscribed, 21408, 20003, …) →
 *   `definitive` (nothing was sent; the same request fails the same way);
 * - 429 → `not_sent` (Twilio's error 20429: never processed, safe to retry) and `rateLimited`,
 *   with the wait a `Retry-After` in `headers` names (Twilio documents none; without one, `once`
 *   uses its rate-limit backoff): the step snoozes, then sends again with the same key;
 * - 5xx, 503 included → `ambiguous` (Twilio's error 20500: a retry may duplicate the message);
 * - `ECONNREFUSED`/DNS → `not_sent`; reset and timeout → `ambiguous` (via `classifyError`);
 * - an error that is neither (thrown before any request) → `definitive`.
 * `code` is Twilio's error code as a string; `reason` names it, for operators.
 * @param headers the response's headers, which the SDK's exceptions do not keep (the adapter
 *   records them per call).
 */
export function classifyTwilioError(err: unknown, headers?: ResponseHeaders): Outcome {
  if (isTwilioHttpError(err)) {
    const outcome = classifyHttpStatus(err.status, headers);
    return {
      ...outcome,
      ...(err.code !== undefined ? { code: String(err.code) } : {}),
      reason:
        `${outcome.reason}${err.code !== undefined ? ` (Twilio ${err.code})` : ''}: ${err.message}`.slice(
          0,
          300,
        ),
    };
  }
  if ((err as { isAxiosError?: unknown } | null)?.isAxiosError === true) return classifyError(err);
  return {
    kind: 'definitive',
    reason: `rejected by the SDK before sending: ${String((err as Error)?.message ?? err)}`.slice(
      0,
      300,
    ),
  };
}
