/**
 * Strict JSON for what Cyclone stores (inputs, outputs): a value that JSON.stringify would
 * silently change (NaN → null, a BigInt throws, a function vanishes from an array as null, a Map
 * as {}) is refused with a `PayloadError`, so nothing is lost without a word. Also canonical
 * (sorted keys) for the input hash of `submitOnce`.
 */
import { createHash } from 'node:crypto';
import type { Json } from './definitions.js';
import { PayloadError } from './errors.js';

/** Default limit of one stored payload (input or output): 1 MiB of JSON text, in bytes. */
export const DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024;

/**
 * Converts `value` to plain JSON data, checking every part.
 * Accepted: null, booleans, finite numbers, strings without NUL (PostgreSQL's jsonb cannot hold
 * U+0000), arrays, plain objects, and objects with `toJSON` (Date). Object properties that are
 * `undefined` are dropped, as JSON does.
 * @throws PayloadError for undefined at the root or in an array, functions, symbols, BigInt,
 *   NaN/±Infinity, NUL characters, cycles, and objects that are not plain (Map, Set, class
 *   instances without toJSON).
 */
export function toJson(value: unknown, path = '$', seen: Set<object> = new Set()): Json {
  if (value === null) return null;
  switch (typeof value) {
    case 'boolean':
      return value;
    case 'number':
      if (!Number.isFinite(value))
        throw new PayloadError(`${value} is not representable in JSON`, path);
      return value;
    case 'string':
      if (value.includes('\u0000')) {
        throw new PayloadError(
          'a NUL character (U+0000) cannot be stored in PostgreSQL jsonb',
          path,
        );
      }
      return value;
    case 'undefined':
      throw new PayloadError('undefined is not JSON', path);
    case 'bigint':
      throw new PayloadError('a BigInt is not JSON (convert it to a string)', path);
    case 'function':
    case 'symbol':
      throw new PayloadError(`a ${typeof value} is not JSON`, path);
  }
  const obj = value as object;
  if (seen.has(obj)) throw new PayloadError('a circular reference is not JSON', path);
  if (typeof (obj as { toJSON?: unknown }).toJSON === 'function') {
    return toJson((obj as { toJSON: () => unknown }).toJSON(), path, seen);
  }
  seen.add(obj);
  try {
    if (Array.isArray(obj)) return obj.map((v, i) => toJson(v, `${path}[${i}]`, seen));
    const proto = Object.getPrototypeOf(obj);
    if (proto !== Object.prototype && proto !== null) {
      throw new PayloadError(
        `a ${proto?.constructor?.name ?? 'non-plain'} object is not JSON (use a plain object or array)`,
        path,
      );
    }
    const out: { [k: string]: Json } = {};
    for (const [k, v] of Object.entries(obj)) {
      if (v === undefined) continue;
      if (k.includes('\u0000')) {
        throw new PayloadError(
          'a NUL character (U+0000) cannot be stored in PostgreSQL jsonb',
          path,
        );
      }
      out[k] = toJson(v, `${path}.${k}`, seen);
    }
    return out;
  } finally {
    seen.delete(obj);
  }
}

/**
 * Serialises `value` strictly (see `toJson`) and enforces `maxBytes` (UTF-8 bytes of the JSON).
 * @returns the JSON text and the normalised value.
 * @throws PayloadError as `toJson`, or when the text is larger than `maxBytes`.
 */
export function encodePayload(
  value: unknown,
  maxBytes: number,
  what: string,
): { text: string; value: Json } {
  const json = toJson(value);
  const text = JSON.stringify(json);
  const bytes = Buffer.byteLength(text, 'utf8');
  if (bytes > maxBytes) {
    throw new PayloadError(
      `${what} is ${bytes} bytes of JSON, over the limit of ${maxBytes} bytes`,
      '$',
    );
  }
  return { text, value: json };
}

/** JSON text with object keys sorted at every level: equal data gives equal text. */
export function canonicalJson(value: Json): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value);
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  const keys = Object.keys(value).sort();
  return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson(value[k] as Json)}`).join(',')}}`;
}

/** SHA-256 (hex) of the canonical JSON of `value`. */
export function hashJson(value: Json): string {
  return createHash('sha256').update(canonicalJson(value)).digest('hex');
}
