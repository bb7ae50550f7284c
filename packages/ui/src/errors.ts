/**
 * The errors of the UI's JSON API: `ApiFailure` carries the HTTP status and the `error` code of
 * the answer (`ApiError` in shared/api.ts); `toApiFailure` maps what a read or an action threw
 * (core's typed errors by `code`, PostgreSQL's by SQLSTATE) to one.
 */
import { CycloneError } from '@cyclone/core';
import { isConnectionError } from '@cyclone/core/internal';
import type { ApiError, ApiErrorCode } from './shared/api.js';

/** HTTP statuses the API answers with. */
export type ApiStatus = 400 | 401 | 403 | 404 | 409 | 413 | 415 | 500 | 503;

/** An answer other than 2xx, thrown inside a route and turned into JSON by the app. */
export class ApiFailure extends Error {
  readonly status: ApiStatus;
  readonly code: ApiErrorCode;
  readonly details: unknown;
  /** Extra headers of the answer (`WWW-Authenticate`). */
  readonly headers: Record<string, string>;

  constructor(
    status: ApiStatus,
    code: ApiErrorCode,
    message: string,
    options: { details?: unknown; headers?: Record<string, string> } = {},
  ) {
    super(message);
    this.name = 'ApiFailure';
    this.status = status;
    this.code = code;
    this.details = options.details;
    this.headers = options.headers ?? {};
  }

  /** The JSON body. */
  body(): ApiError {
    return this.details === undefined
      ? { error: this.code, message: this.message }
      : { error: this.code, message: this.message, details: this.details };
  }
}

/** Core's error codes that are the caller's doing, with their answer. */
const CORE_CODES: Record<string, [ApiStatus, ApiErrorCode]> = {
  RUN_NOT_FOUND: [404, 'run_not_found'],
  NODE_NOT_FOUND: [404, 'node_not_found'],
  SCHEDULE_NOT_FOUND: [404, 'schedule_not_found'],
  INVALID_STATE: [409, 'invalid_state'],
  TRANSACTION_CONFLICT: [409, 'conflict'],
  INVALID_SIGNAL: [400, 'invalid_signal'],
  INPUT_VALIDATION: [400, 'bad_request'],
  PAYLOAD: [400, 'bad_request'],
  CONFIG: [400, 'bad_request'],
  BAD_QUERY: [400, 'bad_request'],
  QUERY_TIMEOUT: [503, 'query_timeout'],
};

/** SQLSTATE 57014: the statement was cancelled, here by the reader's `statement_timeout`. */
const QUERY_CANCELED = '57014';
/**
 * SQLSTATE class 22, data exception: a value from the request PostgreSQL cannot take (a NUL
 * character, a time or interval it cannot read or hold).
 */
const DATA_EXCEPTION = /^22[0-9A-Z]{3}$/;

/**
 * `err` as an `ApiFailure`: itself; core's typed errors by code (a run that does not exist is
 * 404, a state that forbids the action 409); a statement timeout 503 `query_timeout`; a value
 * PostgreSQL cannot take (SQLSTATE class 22) 400 `bad_request`; a lost or refused connection 503
 * `unavailable`; anything else 500 `internal` with a generic message (the details go to the log,
 * not to the page).
 */
export function toApiFailure(err: unknown): ApiFailure {
  if (err instanceof ApiFailure) return err;
  if (CycloneError.isInstance(err)) {
    const mapped = CORE_CODES[err.code];
    if (mapped?.[1] === 'query_timeout') return queryTimeout();
    if (mapped) return new ApiFailure(mapped[0], mapped[1], err.message);
  }
  const sqlState = (err as { code?: unknown } | null)?.code;
  if (sqlState === QUERY_CANCELED) return queryTimeout();
  if (typeof sqlState === 'string' && DATA_EXCEPTION.test(sqlState)) {
    return new ApiFailure(
      400,
      'bad_request',
      'A value in the request cannot be used (a NUL character, or a time or number out of range).',
    );
  }
  if (isConnectionError(err)) {
    return new ApiFailure(503, 'unavailable', 'The database cannot be reached right now.');
  }
  return new ApiFailure(500, 'internal', 'The UI server failed to answer; see its log.');
}

function queryTimeout(): ApiFailure {
  return new ApiFailure(
    503,
    'query_timeout',
    'The query ran past the UI’s statement timeout; narrow the filters or try again.',
  );
}
