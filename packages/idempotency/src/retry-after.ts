/**
 * When a rate-limited call may be made again, read from the provider's answer: the `Retry-After`
 * header (RFC 9110: delay-seconds or an HTTP-date), else a rate-limit reset header (SendGrid's
 * `X-RateLimit-Reset`, a Unix time in seconds; the IETF draft's `RateLimit-Reset`, seconds from
 * now); and the delay to use when the answer names no time. Every adapter reads its headers here.
 */
import { MAX_DELAY_MS } from '@cyclone/core';

/**
 * The delay after a rate-limit answer that names no time, before the call under key is made
 * again for the `call`-th time: 1 s, doubling with each call under the key (2 s, 4 s, …) up to
 * `RATE_LIMIT_BACKOFF_CAP_MS`, plus up to 25 % of jitter so that many throttled steps do not come
 * back at the same instant. The action's own backoff is not visible to a handler (`ctx` does not
 * carry it), so this is the documented stand-in for it.
 */
export function rateLimitBackoffMs(call: number): number {
  const n = Number.isInteger(call) && call >= 1 ? call : 1;
  const base = Math.min(
    RATE_LIMIT_BACKOFF_BASE_MS * 2 ** Math.min(n - 1, 30),
    RATE_LIMIT_BACKOFF_CAP_MS,
  );
  return Math.ceil(base + base * 0.25 * Math.random());
}

/** First delay of `rateLimitBackoffMs`: 1,000 ms. */
export const RATE_LIMIT_BACKOFF_BASE_MS = 1_000;

/** Longest delay of `rateLimitBackoffMs` before jitter: 60,000 ms. */
export const RATE_LIMIT_BACKOFF_CAP_MS = 60_000;

/**
 * Response headers in any of the shapes the SDKs hand out: a WHATWG `Headers`, axios'
 * `AxiosHeaders` (both have `get`), or a plain object (Node's `IncomingHttpHeaders`, Stripe's
 * `err.headers`) whose names may be in any case and whose values may be arrays.
 */
export type ResponseHeaders =
  | { get(name: string): unknown }
  | Readonly<Record<string, unknown>>
  | null
  | undefined;

/** The value of header `name` (case-insensitive), the first one of a repeated header. */
export function headerValue(headers: ResponseHeaders, name: string): string | undefined {
  if (headers === null || typeof headers !== 'object') return undefined;
  const lower = name.toLowerCase();
  let v: unknown;
  if (typeof (headers as { get?: unknown }).get === 'function') {
    try {
      v = (headers as { get(name: string): unknown }).get(lower);
    } catch {
      v = undefined;
    }
  }
  if (v === undefined || v === null) {
    const rec = headers as Record<string, unknown>;
    v = rec[lower] ?? rec[name];
    if (v === undefined) {
      const found = Object.keys(rec).find((k) => k.toLowerCase() === lower);
      v = found === undefined ? undefined : rec[found];
    }
  }
  if (Array.isArray(v)) v = v[0];
  if (typeof v === 'number' && Number.isFinite(v)) return String(v);
  return typeof v === 'string' ? v : undefined;
}

/** delay-seconds: digits (a fraction is tolerated; RFC 9110 has whole seconds only). */
const SECONDS = /^\d+(?:\.\d+)?$/;

/** Clamps a delay in ms to 0 … `MAX_DELAY_MS`, rounded up. */
function clampDelay(ms: number): number {
  return Math.min(MAX_DELAY_MS, Math.max(0, Math.ceil(ms)));
}

/**
 * Parses a `Retry-After` value into a delay in ms from `now`:
 * - delay-seconds (`"2"`) → 2,000;
 * - an HTTP-date (`"Wed, 21 Oct 2026 07:28:00 GMT"`) → the time until it, 0 when it has passed;
 * - anything else (empty, a negative number, words, a number with a unit) → `undefined`;
 * - at most `MAX_DELAY_MS` (a snooze cannot be longer).
 */
export function parseRetryAfter(
  value: string | undefined,
  now: number = Date.now(),
): number | undefined {
  if (typeof value !== 'string') return undefined;
  const v = value.trim();
  if (v === '') return undefined;
  if (SECONDS.test(v)) return clampDelay(Number(v) * 1000);
  const at = parseHttpDate(v);
  return at === undefined ? undefined : clampDelay(at - now);
}

const DAY = '(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)';
const LONG_DAY = '(?:Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday)';
const MONTH = '(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)';
const TIME = '\\d{2}:\\d{2}:\\d{2}';
/** The three HTTP-date forms recipients must accept (RFC 9110 § 5.6.7), all in GMT. */
const IMF_FIXDATE = new RegExp(`^${DAY}, \\d{2} ${MONTH} \\d{4} ${TIME} GMT$`, 'i');
const RFC850_DATE = new RegExp(`^${LONG_DAY}, \\d{2}-${MONTH}-\\d{2} ${TIME} GMT$`, 'i');
const ASCTIME_DATE = new RegExp(`^${DAY} ${MONTH} (?: \\d|\\d{2}) ${TIME} \\d{4}$`, 'i');

/**
 * An HTTP-date in ms since the epoch, or `undefined`. Matched strictly first: `Date.parse` alone
 * takes "hello 2020" or "Mon 2" for dates.
 */
function parseHttpDate(v: string): number | undefined {
  let text: string;
  if (IMF_FIXDATE.test(v) || RFC850_DATE.test(v)) text = v;
  // asctime carries no zone and is GMT; Date.parse would take it for local time
  else if (ASCTIME_DATE.test(v)) text = `${v} GMT`;
  else return undefined;
  const at = Date.parse(text);
  return Number.isNaN(at) ? undefined : at;
}

/**
 * Parses a rate-limit reset value: a Unix time in seconds (≥ 10⁹, SendGrid's `X-RateLimit-Reset`)
 * or in ms (≥ 10¹²) → the time until it (0 when passed); a smaller number → seconds from now (the
 * IETF draft's `RateLimit-Reset`); anything else → `undefined`. At most `MAX_DELAY_MS`.
 */
export function parseRateLimitReset(
  value: string | undefined,
  now: number = Date.now(),
): number | undefined {
  if (typeof value !== 'string') return undefined;
  const v = value.trim();
  if (!SECONDS.test(v)) return undefined;
  const n = Number(v);
  if (n >= 1e12) return clampDelay(n - now);
  if (n >= 1e9) return clampDelay(n * 1000 - now);
  return clampDelay(n * 1000);
}

/**
 * How long a rate-limit answer asks to wait, in ms, from its headers: `Retry-After` first (the
 * standard), then `RateLimit-Reset`, then `X-RateLimit-Reset`; `undefined` when none names a
 * time (the caller then uses its backoff, e.g. `rateLimitBackoffMs`). 0 … `MAX_DELAY_MS`.
 */
export function retryAfterMs(
  headers: ResponseHeaders,
  now: number = Date.now(),
): number | undefined {
  return (
    parseRetryAfter(headerValue(headers, 'retry-after'), now) ??
    parseRateLimitReset(headerValue(headers, 'ratelimit-reset'), now) ??
    parseRateLimitReset(headerValue(headers, 'x-ratelimit-reset'), now)
  );
}
