/**
 * An answer as the ledger keeps it and replays it: status, the headers worth keeping, and the
 * body (text, or base64 for binary). A guarded call returns the same `Response` on its first call
 * and on every replay, built from this record; only a replay carries `cyclone-replayed: ledger`.
 */

/** The JSON the ledger stores for a completed call. */
export interface StoredResponse {
  status: number;
  statusText: string;
  /** The final URL (after redirects). */
  url: string;
  /** The kept headers (`DEFAULT_KEPT_HEADERS`, the key header, `keepHeaders`), lower-cased. */
  headers: Record<string, string>;
  /** The body: UTF-8 text, or base64 (`bodyEncoding`); null when the answer had none. */
  body: string | null;
  bodyEncoding: 'utf8' | 'base64';
}

/**
 * Response headers kept with a stored answer: what describes the body and the resource
 * (`content-type`, `content-language`, `content-location`, `location`, `etag`,
 * `last-modified`, `link`) and what identifies the request at the provider (`request-id`,
 * `x-request-id`, `idempotent-replayed`, `idempotency-key`). Never kept: `set-cookie` (a
 * secret, and stale), hop-by-hop and transfer headers (`content-length`, `content-encoding`,
 * `transfer-encoding`: the body is stored decoded), `date` and rate-limit headers (stale on a
 * replay).
 */
export const DEFAULT_KEPT_HEADERS: readonly string[] = Object.freeze([
  'content-type',
  'content-language',
  'content-location',
  'location',
  'etag',
  'last-modified',
  'link',
  'request-id',
  'x-request-id',
  'idempotent-replayed',
  'idempotency-key',
]);

/** Headers never stored, whatever `keepHeaders` says. */
const NEVER_KEPT = new Set([
  'set-cookie',
  'set-cookie2',
  'content-length',
  'content-encoding',
  'transfer-encoding',
  'connection',
  'keep-alive',
  'cyclone-replayed',
]);

/** The header a replayed answer carries, with the value `ledger`. */
export const REPLAYED_HEADER = 'cyclone-replayed';

const TEXTUAL = /^(text\/|application\/([\w.+-]*\+)?(json|xml|x-www-form-urlencoded|javascript))/i;

/** Every header of a fetch `Response`, names lower-cased (repeated ones joined by `, `). */
export function headersOf(res: Response): Record<string, string> {
  const out: Record<string, string> = {};
  res.headers.forEach((value, name) => {
    out[name.toLowerCase()] = value;
  });
  return out;
}

/** The answer as stored: its kept headers (`keep`, lower-cased) and its body, text or base64. */
export function toStored(
  res: Response,
  bytes: Uint8Array,
  all: Record<string, string>,
  keep: ReadonlySet<string>,
): StoredResponse {
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(all)) {
    if (keep.has(name) && !NEVER_KEPT.has(name)) headers[name] = value;
  }
  let body: string | null = null;
  let bodyEncoding: StoredResponse['bodyEncoding'] = 'utf8';
  if (bytes.byteLength > 0) {
    const text = utf8(bytes, all['content-type']);
    if (text === undefined) {
      body = Buffer.from(bytes).toString('base64');
      bodyEncoding = 'base64';
    } else {
      body = text;
    }
  }
  return {
    status: res.status,
    statusText: res.statusText,
    url: res.url,
    headers,
    body,
    bodyEncoding,
  };
}

/**
 * The body as text when it is textual: a text-like content type, or none and valid UTF-8 without
 * NUL (which jsonb cannot hold); otherwise undefined (stored as base64).
 */
function utf8(bytes: Uint8Array, contentType: string | undefined): string | undefined {
  if (contentType !== undefined && !TEXTUAL.test(contentType)) return undefined;
  try {
    const text = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }).decode(bytes);
    return text.includes('\u0000') ? undefined : text;
  } catch {
    return undefined;
  }
}

/** Statuses whose response must not have a body (the `Response` constructor refuses one). */
const NULL_BODY = new Set([101, 103, 204, 205, 304]);

/**
 * A fetch `Response` for a stored answer; `replayed` adds `cyclone-replayed: ledger`. Its `url`
 * is the stored one.
 */
export function toResponse(s: StoredResponse, replayed: boolean): Response {
  const headers = new Headers(s.headers);
  if (replayed) headers.set(REPLAYED_HEADER, 'ledger');
  const body =
    s.body === null || NULL_BODY.has(s.status)
      ? null
      : s.bodyEncoding === 'base64'
        ? Buffer.from(s.body, 'base64')
        : s.body;
  const res = new Response(body, { status: s.status, statusText: s.statusText, headers });
  Object.defineProperty(res, 'url', { value: s.url, enumerable: true, configurable: true });
  return res;
}
