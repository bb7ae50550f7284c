/**
 * Decoding of Stripe's form-encoded request bodies and query strings
 * (`application/x-www-form-urlencoded` with bracket nesting, `metadata[cyclone_key]=…`,
 * `payment_method_types[0]=card`), and the canonical form the fake compares parameters in.
 */

/** A decoded parameter value: strings at the leaves (the wire has no other type). */
export type FormValue = string | FormValue[] | { [key: string]: FormValue };

/** Decoded parameters of one request. */
export type FormParams = { [key: string]: FormValue };

/**
 * Splits `a[b][0][c]` into `['a', 'b', '0', 'c']`. A key without brackets is one segment; an
 * empty pair `[]` becomes the segment `''` (append).
 */
function segments(key: string): string[] {
  const open = key.indexOf('[');
  if (open <= 0) return [key];
  const out = [key.slice(0, open)];
  const re = /\[([^\]]*)\]/g;
  re.lastIndex = open;
  for (let m = re.exec(key); m; m = re.exec(key)) out.push(m[1] ?? '');
  return out;
}

/** True when every key of `o` is a non-negative integer (an indexed array on the wire). */
function isIndexed(o: Record<string, FormValue>): boolean {
  const keys = Object.keys(o);
  return keys.length > 0 && keys.every((k) => /^\d+$/.test(k));
}

/** Turns objects whose keys are all indices into arrays (ordered by index), recursively. */
function arrayify(v: FormValue): FormValue {
  if (typeof v === 'string') return v;
  if (Array.isArray(v)) return v.map(arrayify);
  const entries = Object.entries(v).map(([k, x]) => [k, arrayify(x)] as const);
  const obj = Object.fromEntries(entries) as Record<string, FormValue>;
  if (isIndexed(obj)) {
    return Object.keys(obj)
      .sort((a, b) => Number(a) - Number(b))
      .map((k) => obj[k] as FormValue);
  }
  return obj;
}

/**
 * Decodes a form-encoded string (a request body or a query string, without `?`) into nested
 * parameters. Later duplicates of a scalar key win, as in Stripe's decoder.
 */
export function decodeForm(text: string): FormParams {
  const root: Record<string, FormValue> = {};
  for (const [rawKey, value] of new URLSearchParams(text)) {
    const path = segments(rawKey);
    let node: Record<string, FormValue> = root;
    for (let i = 0; i < path.length; i++) {
      let seg = path[i] as string;
      const last = i === path.length - 1;
      if (seg === '') seg = String(Object.keys(node).length);
      if (last) {
        node[seg] = value;
      } else {
        const next = node[seg];
        if (next === undefined || typeof next === 'string' || Array.isArray(next)) {
          const fresh: Record<string, FormValue> = {};
          node[seg] = fresh;
          node = fresh;
        } else {
          node = next;
        }
      }
    }
  }
  return arrayify(root) as FormParams;
}

/** A stable JSON text of `v` with object keys sorted: equal parameters give equal text. */
export function canonical(v: unknown): string {
  if (v === null || typeof v !== 'object') return JSON.stringify(v);
  if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`;
  const o = v as Record<string, unknown>;
  return `{${Object.keys(o)
    .sort()
    .map((k) => `${JSON.stringify(k)}:${canonical(o[k])}`)
    .join(',')}}`;
}
