/**
 * What is stored of an error: a step's error entry (`StepError`), with its message and stack
 * cut to a bound and secrets redacted.
 */
import { storableText } from './json.js';
import { redactSecrets } from './redact.js';
import type { StepError, StepErrorKind } from './types.js';

/** The most characters of an error message stored per failed attempt. */
export const MAX_ERROR_MESSAGE_CHARS = 2000;
/** The most characters of an error stack stored per failed attempt. */
export const MAX_ERROR_STACK_CHARS = 4000;

/** A message for anything thrown, Error or not. */
export function describeError(err: unknown): string {
  if (err instanceof Error) return err.message || err.name;
  if (typeof err === 'string') return err;
  if (err === undefined) return 'undefined was thrown';
  try {
    return `non-Error value thrown: ${JSON.stringify(err)}`;
  } catch {
    return `non-Error value thrown: ${String(err)}`;
  }
}

/**
 * `text` made safe to store: secrets redacted first, so that no part of one survives the cut,
 * then cut to `maxChars` as storable text (no NUL, no lone surrogate, which jsonb refuses).
 */
export function storableErrorText(text: string, maxChars: number): string {
  return storableText(redactSecrets(text), maxChars);
}

/**
 * The error entry of a failed attempt, as appended to the step's `errors`.
 * @param at the time as an ISO-8601 string (default now, by this process's clock: the entry is
 *   for people; the schedule itself is set by the database clock).
 */
export function errorEntry(
  err: unknown,
  attempt: number,
  kind: StepErrorKind,
  at: string = new Date().toISOString(),
): StepError {
  return {
    attempt,
    at,
    kind,
    message: storableErrorText(describeError(err), MAX_ERROR_MESSAGE_CHARS),
    ...(err instanceof Error && err.stack
      ? { stack: storableErrorText(err.stack, MAX_ERROR_STACK_CHARS) }
      : {}),
  };
}
