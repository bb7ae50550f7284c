/**
 * Payloads on their way to the page: the `redact` hook, then a preview cut to `previewBytes`.
 * Values stay raw JSON text (PostgreSQL's `::text`) when no hook is set, so numbers beyond 2^53
 * keep every digit; with a hook the value is parsed, handed to it and serialised again.
 */
import type { Payload } from './shared/api.js';

/** What a redacted value is: where it comes from in the run. */
export interface RedactTarget {
  /**
   * `input` (the run's), `output` (a step's), `error` (a step's recorded error: `{ attempt,
   * at, kind, message, stack? }`), `ledgerResult` / `ledgerError` (a provider call's recorded
   * result or error).
   */
  kind: 'input' | 'output' | 'error' | 'ledgerResult' | 'ledgerError';
  runId: string;
  /** The step's node; absent for a run's input. */
  node?: string;
}

/**
 * The `redact` option: gets each value before it leaves the process and returns what the page
 * may see (a copy with fields masked, or `undefined` to hide the value whole). Runs on every
 * answer that carries a payload or an error, and on downloads. Must not throw; a throw answers
 * 500 and shows nothing.
 */
export type RedactHook = (value: unknown, target: RedactTarget) => unknown;

/** Default preview size of a payload, bytes (64 KiB). */
export const DEFAULT_PREVIEW_BYTES = 64 * 1024;

/** The first `max` bytes of `text` as UTF-8, cut before a partial character. */
export function utf8Prefix(text: string, max: number): string {
  const buf = Buffer.from(text, 'utf8');
  if (buf.length <= max) return text;
  let end = max;
  // Step back over continuation bytes (10xxxxxx) so no character is split.
  while (end > 0 && ((buf[end] ?? 0) & 0xc0) === 0x80) end--;
  return buf.subarray(0, end).toString('utf8');
}

/**
 * `text` (raw JSON) after the redact hook: unchanged without a hook; else parsed, redacted and
 * serialised, or `undefined` when the hook hid it.
 */
export function redactText(
  text: string,
  target: RedactTarget,
  redact: RedactHook | undefined,
): string | undefined {
  if (!redact) return text;
  const value = redact(JSON.parse(text), target);
  return value === undefined ? undefined : JSON.stringify(value);
}

/**
 * A `Payload` from the full raw JSON `text` of a value (null: none): redacted, then cut to
 * `previewBytes` with `truncated` set when longer.
 */
export function toPayload(
  text: string | null,
  target: RedactTarget,
  redact: RedactHook | undefined,
  previewBytes: number,
): Payload | null {
  if (text === null) return null;
  const shown = redactText(text, target, redact);
  if (shown === undefined) return { bytes: 0, truncated: false, text: '', hidden: true };
  const bytes = Buffer.byteLength(shown, 'utf8');
  if (bytes <= previewBytes) return { bytes, truncated: false, text: shown };
  return { bytes, truncated: true, text: utf8Prefix(shown, previewBytes) };
}

/**
 * A `Payload` from a preview the database already cut (`prefix`, the first bytes of a value of
 * `bytes` bytes). Only without a redact hook: a cut value cannot be parsed, so with a hook the
 * full value must be read and given to `toPayload`.
 */
export function previewPayload(prefix: string, bytes: number, previewBytes: number): Payload {
  const text = utf8Prefix(prefix, previewBytes);
  const truncated = bytes > Buffer.byteLength(text, 'utf8');
  return { bytes, truncated, text };
}
