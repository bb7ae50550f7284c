/**
 * What a failed `@sendgrid/mail` send means for the e-mail, by what SendGrid documents of each
 * answer. The SDK rejects with one of three shapes:
 * - `ResponseError` (HTTP status ≥ 400): `code` is the status (a number), `response.body` is
 *   `{ errors: [{ message, field, help }] }`;
 * - a raw `AxiosError` (`isAxiosError`, no `response`): a transport failure, `code`
 *   `ECONNREFUSED`, `ECONNRESET`, `ECONNABORTED` (timeout), …;
 * - any other error: thrown by the SDK's mail builder or secret filter before any request.
 */
import {
  classifyError,
  classifyHttpStatus,
  type Outcome,
  type ResponseHeaders,
} from '@cyclone/idempotency';

/** The `ResponseError` shape of `@sendgrid/helpers` (not a dependency of ours: duck-typed). */
interface ResponseErrorLike {
  code: number;
  message: string;
  response: {
    /** The answer's headers (axios'), e.g. a 429's `X-RateLimit-Reset`. */
    headers?: unknown;
    body?: { errors?: { message?: string; field?: string | null }[] };
  };
}

/** True for the SDK's `ResponseError` (an HTTP status ≥ 400 was answered). */
export function isSendGridResponseError(err: unknown): err is ResponseErrorLike {
  const e = err as Partial<ResponseErrorLike> | null;
  return (
    typeof e === 'object' &&
    e !== null &&
    typeof e.code === 'number' &&
    typeof e.response === 'object' &&
    e.response !== null
  );
}

/**
 * Classifies a failed send:
 * - HTTP 400, 401, 403, 404, 405, 413 → `definitive` (SendGrid refused it: nothing was sent);
 * - 429 → `not_sent` (throttled before acceptance), `rateLimited` with the wait its
 *   `X-RateLimit-Reset` (a Unix time, SendGrid's rate-limit header) or a `Retry-After` names:
 *   `once` snoozes the step until then and sends again with the same key;
 * - 5xx, 503 included → `ambiguous` (undocumented whether it was accepted);
 * - `ECONNREFUSED` and DNS errors → `not_sent`; resets and timeouts → `ambiguous` (via
 *   `@cyclone/idempotency`'s `classifyError`);
 * - an error that is neither a `ResponseError` nor an `AxiosError` was thrown before any
 *   request (an invalid mail, a secret-filter match) → `definitive`.
 * The `reason` names SendGrid's first error message, for operators.
 */
export function classifySendGridError(err: unknown): Outcome {
  if (isSendGridResponseError(err)) {
    const outcome = classifyHttpStatus(err.code, err.response.headers as ResponseHeaders);
    const first = err.response.body?.errors?.[0];
    const detail = first?.message
      ? `: ${first.message}${first.field ? ` (${first.field})` : ''}`
      : '';
    return { ...outcome, reason: `${outcome.reason}${detail}`.slice(0, 300) };
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
