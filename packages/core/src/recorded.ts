/**
 * What recording an attempt's outcome did (`Completer.record`), as the worker's telemetry reports
 * it: its own module, so that the completion and the telemetry share it without importing each
 * other.
 */
import type { StepErrorKind } from './types.js';

/**
 * What became of an attempt: the state its step moved to (`completed`, `skipped`, `retryable`,
 * `discarded`; `snoozed`: `scheduled` again without using the attempt), `lease_lost` (fenced out:
 * another claim holds the step) or `unrecorded` (the database could not be reached; the lease
 * will expire and the sweep takes the step over).
 */
export type RecordedOutcome =
  | 'completed'
  | 'skipped'
  | 'retryable'
  | 'discarded'
  | 'snoozed'
  | 'lease_lost'
  | 'unrecorded';

/** What `Completer.record` did, for the attempt's span and metrics. */
export interface Recorded {
  readonly outcome: RecordedOutcome;
  /** The attempt's error (a failure), or the database's when the outcome is `unrecorded`. */
  readonly error?: unknown;
  /** The kind of the failure recorded. */
  readonly errorKind?: StepErrorKind;
  /** A snooze: the `code` of its SnoozeError and the delay. */
  readonly snooze?: { readonly code: string; readonly delayMs: number };
}
