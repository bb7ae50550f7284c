/**
 * A guarded request made whole before anything is written: method, URL, headers and the body as
 * bytes, so that it can be hashed into the ledger row and sent again byte for byte on a later
 * attempt. Strings, `URLSearchParams`, bytes (`ArrayBuffer`, typed arrays, `DataView`, `Blob`)
 * and a `Request`'s own body are taken; streams, async iterables, `FormData` and plain objects
 * are refused (`UnsupportedBodyError`). The key goes into a header or a JSON body field here too.
 */
import { createHash } from 'node:crypto';
import { IdempotencyUsageError } from '@cyclone/idempotency';
import { UnsupportedBodyError } from './errors.js';

/** A request ready to hash and send. */
export interface PreparedRequest {
  /** Upper-case. */
  method: string;
  /** Absolute. */
  url: string;
  headers: Headers;
  body: Uint8Array | null;
  /** The other `RequestInit` fields given (`redirect`, `referrer`, `keepalive`, …). */
  rest: RequestInit;
}

/** `RequestInit` fields replaced by the wrapper (body and headers as prepared, its own signal). */
const REPLACED = new Set(['method', 'headers', 'body', 'signal', 'duplex', 'window']);

/**
 * Reads fetch's arguments into a `PreparedRequest`: `init` overrides a `Request` input, as in
 * fetch; a `Request`'s body is read whole into memory.
 * @throws UnsupportedBodyError for a body that cannot be sent again as it was.
 * @throws IdempotencyUsageError for a URL that is not absolute.
 */
export async function prepareRequest(
  input: string | URL | Request,
  init: RequestInit | undefined,
): Promise<PreparedRequest> {
  const req = typeof input === 'object' && !(input instanceof URL) ? input : undefined;
  const rawUrl = req ? req.url : String(input);
  let url: string;
  try {
    url = new URL(rawUrl).href;
  } catch {
    throw new IdempotencyUsageError(`idempotentFetch needs an absolute URL, got ${rawUrl}`);
  }
  const method = (init?.method ?? req?.method ?? 'GET').toUpperCase();
  const headers = new Headers(req?.headers);
  if (init?.headers !== undefined) {
    for (const [name, value] of new Headers(init.headers)) headers.set(name, value);
  }
  let body: Uint8Array | null;
  if (init?.body !== undefined) {
    body = await bodyBytes(init.body, headers);
  } else if (req?.body) {
    body = new Uint8Array(await req.clone().arrayBuffer());
  } else {
    body = null;
  }
  const rest: RequestInit = {};
  for (const [k, v] of Object.entries(init ?? {})) {
    if (!REPLACED.has(k)) (rest as Record<string, unknown>)[k] = v;
  }
  return { method, url, headers, body, rest };
}

function isStream(body: object): boolean {
  return (
    typeof (body as { getReader?: unknown }).getReader === 'function' ||
    typeof (body as { pipe?: unknown }).pipe === 'function'
  );
}

/**
 * A `BodyInit` as bytes, setting the content type fetch would set when none is given.
 * @throws UnsupportedBodyError for a stream, an async iterable, `FormData` or a plain object.
 */
async function bodyBytes(
  body: NonNullable<RequestInit['body']> | null,
  headers: Headers,
): Promise<Uint8Array | null> {
  if (body === null) return null;
  const defaultType = (type: string) => {
    if (!headers.has('content-type')) headers.set('content-type', type);
  };
  if (typeof body === 'string') {
    defaultType('text/plain;charset=UTF-8');
    return new TextEncoder().encode(body);
  }
  if (body instanceof URLSearchParams) {
    defaultType('application/x-www-form-urlencoded;charset=UTF-8');
    return new TextEncoder().encode(body.toString());
  }
  if (body instanceof ArrayBuffer) return new Uint8Array(body.slice(0));
  if (ArrayBuffer.isView(body)) {
    return new Uint8Array(body.buffer.slice(body.byteOffset, body.byteOffset + body.byteLength));
  }
  if (body instanceof Blob) {
    if (body.type) defaultType(body.type);
    return new Uint8Array(await body.arrayBuffer());
  }
  if (body instanceof FormData) {
    throw new UnsupportedBodyError(
      'form-data',
      'idempotentFetch cannot guard a FormData body: its multipart boundary is new on every encoding, so a retry would not be the same request. Encode it once yourself (a fixed boundary, as bytes) or send URLSearchParams.',
    );
  }
  if (typeof body === 'object' && isStream(body)) {
    throw new UnsupportedBodyError(
      'stream',
      'idempotentFetch cannot guard a streamed body (ReadableStream, Node stream): it can be read only once, so it can be neither hashed into the ledger nor sent again with the same key. Buffer it first (a string, bytes or a Blob).',
    );
  }
  if (typeof body === 'object' && Symbol.asyncIterator in body) {
    throw new UnsupportedBodyError(
      'async-iterable',
      'idempotentFetch cannot guard an async iterable body: it can be read only once, so it can be neither hashed into the ledger nor sent again with the same key. Buffer it first (a string, bytes or a Blob).',
    );
  }
  throw new UnsupportedBodyError(
    'object',
    `idempotentFetch takes a string, URLSearchParams or bytes as the body, got ${Object.prototype.toString.call(body)}; send JSON as JSON.stringify(value) with content-type application/json`,
  );
}

/** SHA-256 hex of the body (the ledger hashes this, not the body itself); null for none. */
export function bodyDigest(body: Uint8Array | null): string | null {
  return body === null ? null : createHash('sha256').update(body).digest('hex');
}

/**
 * The request with its key: in header `keyHeader` (given already written, see `formatKey`), or
 * as the top-level string field `keyField` of a JSON object body (re-serialised, with
 * `content-type: application/json` when none was given).
 * @throws IdempotencyUsageError when the request already carries that header or field, or when
 *   a body-field key meets a body that is not a JSON object.
 */
export function withKey(
  req: PreparedRequest,
  key: string,
  where: { header: string } | { field: string },
): { headers: Headers; body: Uint8Array | null } {
  const headers = new Headers(req.headers);
  if ('header' in where) {
    headers.set(where.header, key);
    return { headers, body: req.body };
  }
  const obj = jsonObject(req.body, where.field);
  obj[where.field] = key;
  if (!headers.has('content-type')) headers.set('content-type', 'application/json');
  return { headers, body: new TextEncoder().encode(JSON.stringify(obj)) };
}

/**
 * Checks, before anything is written, that the key can be put where it goes: the caller has not
 * set it already, and a body-field key has a JSON object body.
 * @throws IdempotencyUsageError otherwise.
 */
export function checkKeyPlace(
  req: PreparedRequest,
  where: { header: string } | { field: string },
): void {
  if ('header' in where) {
    if (req.headers.has(where.header)) {
      throw new IdempotencyUsageError(
        `the request already has a ${where.header} header: idempotentFetch sets it to the step's key; remove it (or call plain fetch)`,
      );
    }
    return;
  }
  if (Object.hasOwn(jsonObject(req.body, where.field), where.field)) {
    throw new IdempotencyUsageError(
      `the request body already has a ${where.field} field: idempotentFetch sets it to the step's key; remove it (or call plain fetch)`,
    );
  }
}

function jsonObject(body: Uint8Array | null, field: string): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(new TextDecoder().decode(body ?? new Uint8Array()));
  } catch {
    value = undefined;
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw new IdempotencyUsageError(
      `this API takes its idempotency key in the body field ${field}: the body must be a JSON object (JSON.stringify({...}))`,
    );
  }
  return value as Record<string, unknown>;
}
