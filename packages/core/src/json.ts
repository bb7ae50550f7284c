/**
 * Strict JSON for what Cyclone stores (inputs, outputs): a value that JSON.stringify would
 * silently change (NaN → null, a BigInt throws, a function vanishes from an array as null, a Map
 * as {}) is refused with a `PayloadError`, so nothing is lost without a word. Also canonical
 * (sorted keys) for the input hash of `submitOnce`.
 */
import { hash } from 'node:crypto';
import { PayloadError } from './errors.js';
import type { Json } from './types.js';

/** Default limit of one stored payload (input or output): 1 MiB of JSON text, in bytes. */
export const DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024;

/** The deepest nesting of arrays and objects stored (deeper values get a `PayloadError`). */
export const MAX_DEPTH = 512;

/** A UTF-16 surrogate without its pair: valid in a JS string, refused by PostgreSQL's jsonb. */
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/**
 * True when PostgreSQL can store `s` as text and jsonb unchanged: no NUL character and no lone
 * UTF-16 surrogate (PostgreSQL refuses the first and would store U+FFFD for the second).
 */
export function isStorableText(s: string): boolean {
  return !s.includes('\u0000') && !LONE_SURROGATE.test(s);
}

function checkString(s: string, path: string): void {
  if (s.includes('\u0000')) {
    throw new PayloadError('a NUL character (U+0000) cannot be stored in PostgreSQL jsonb', path);
  }
  if (LONE_SURROGATE.test(s)) {
    throw new PayloadError(
      'a lone UTF-16 surrogate (half of a character pair) cannot be stored in PostgreSQL jsonb',
      path,
    );
  }
}

/**
 * Text made safe to store in jsonb (error messages, stacks): at most `maxChars` UTF-16 units,
 * NUL written as the six characters `\u0000`, and lone surrogates (also those made by cutting a
 * pair in two) replaced by U+FFFD.
 */
export function storableText(s: string, maxChars: number): string {
  return s
    .replaceAll('\u0000', '\\u0000')
    .slice(0, maxChars)
    .replace(new RegExp(LONE_SURROGATE.source, 'g'), '\uFFFD');
}

/**
 * Converts `value` to plain JSON data, checking every part.
 * Accepted: null, booleans, finite numbers, strings without NUL or lone surrogates (PostgreSQL's
 * jsonb refuses both), arrays, plain objects, and objects with `toJSON` (Date). Object
 * properties that are `undefined` are dropped, as JSON does; a `__proto__` key is kept.
 * @throws PayloadError for undefined at the root or in an array, functions, symbols, BigInt,
 *   NaN/±Infinity, NUL characters, lone surrogates, cycles, nesting deeper than `MAX_DEPTH`,
 *   and objects that are not plain (Map, Set, class instances without toJSON).
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
      checkString(value, path);
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
  if (seen.size >= MAX_DEPTH) {
    throw new PayloadError(`nesting deeper than ${MAX_DEPTH} levels is not stored`, path);
  }
  if (typeof (obj as { toJSON?: unknown }).toJSON === 'function') {
    return toJson((obj as { toJSON: () => unknown }).toJSON(), path, seen);
  }
  seen.add(obj);
  try {
    if (Array.isArray(obj)) {
      // A hole becomes null, as in the JSON text: map would keep it, and the input hash
      // (canonicalJson) would then differ from that of the stored text's data.
      const arr: Json[] = new Array(obj.length);
      for (let i = 0; i < obj.length; i++) {
        arr[i] = i in obj ? toJson(obj[i], `${path}[${i}]`, seen) : null;
      }
      return arr;
    }
    const proto = Object.getPrototypeOf(obj);
    if (proto !== Object.prototype && proto !== null) {
      throw new PayloadError(
        `a ${proto?.constructor?.name ?? 'non-plain'} object is not JSON (use a plain object or array)`,
        path,
      );
    }
    // No prototype: a key named `__proto__` (common in parsed webhook bodies) stays an own
    // property instead of meeting Object.prototype's setter and vanishing.
    const out: { [k: string]: Json } = Object.create(null);
    for (const [k, v] of Object.entries(obj)) {
      if (v === undefined) continue;
      checkString(k, path);
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

/**
 * SHA-256 (hex) of the canonical JSON of `value`. The one-shot `hash` rather than a `Hash`
 * object: a third of the time on a submit after the process was idle (`bench/README.md` row 5).
 */
export function hashJson(value: Json): string {
  return hash('sha256', canonicalJson(value), 'hex');
}
