/**
 * Reading and validating a request's parameters the way Stripe does, and the `invalid_request_error`
 * failures a bad one ends with (not stored under an idempotency key).
 */
import type { FormParams } from '../form.js';
import { ApiFailure } from './objects.js';

/** A 400 `parameter_invalid` (or `code`) failure of `param`, not stored. */
export const invalid = (message: string, param?: string, code = 'parameter_invalid') =>
  new ApiFailure(400, { type: 'invalid_request_error', code, message, param }, false);

/** A 400 `parameter_missing` failure of `param`, not stored. */
export const missing = (param: string) =>
  invalid(`Missing required param: ${param}.`, param, 'parameter_missing');

/** A 404 `resource_missing` failure for the object `id` of `kind`, not stored. */
export const noSuch = (kind: string, id: string, param = 'id') =>
  new ApiFailure(
    404,
    {
      type: 'invalid_request_error',
      code: 'resource_missing',
      message: `No such ${kind}: '${id}'`,
      param,
    },
    false,
  );

/** The string parameter `name`, if given. @throws ApiFailure when it is not a string. */
export function str(params: FormParams, name: string): string | undefined {
  const v = params[name];
  if (v === undefined) return undefined;
  if (typeof v !== 'string') throw invalid(`Invalid string: ${name}`, name);
  return v;
}

/** The integer parameter `name`, if given and not empty. @throws ApiFailure when malformed. */
export function int(params: FormParams, name: string): number | undefined {
  const v = str(params, name);
  if (v === undefined || v === '') return undefined;
  if (!/^-?\d+$/.test(v)) {
    throw invalid(`Invalid integer: ${v}`, name, 'parameter_invalid_integer');
  }
  return Number(v);
}

/** The boolean parameter `name` (`true`/`false`), if given. @throws ApiFailure when malformed. */
export function bool(params: FormParams, name: string): boolean | undefined {
  const v = str(params, name);
  if (v === undefined || v === '') return undefined;
  if (v !== 'true' && v !== 'false') throw invalid(`Invalid boolean: ${v}`, name);
  return v === 'true';
}

/** Stripe's metadata limits: ≤ 50 keys, key ≤ 40 characters, value ≤ 500 characters. */
export function metadata(params: FormParams): Record<string, string> {
  const v = params.metadata;
  if (v === undefined || v === '') return {};
  if (typeof v !== 'object' || Array.isArray(v)) throw invalid('Invalid hash', 'metadata');
  const out: Record<string, string> = {};
  const entries = Object.entries(v);
  if (entries.length > 50) {
    throw invalid('You can specify up to 50 keys in metadata.', 'metadata');
  }
  for (const [k, val] of entries) {
    if (typeof val !== 'string') throw invalid('Invalid metadata value', `metadata[${k}]`);
    if (k.length > 40) {
      throw invalid('Metadata keys can have a maximum length of 40 characters.', `metadata[${k}]`);
    }
    if (val.length > 500) {
      throw invalid(
        'Metadata values can have a maximum length of 500 characters.',
        `metadata[${k}]`,
      );
    }
    if (val !== '') out[k] = val;
  }
  return out;
}

/** @throws ApiFailure (`parameter_unknown`) for a parameter outside `allowed`. */
export function onlyKnown(params: FormParams, allowed: readonly string[]): void {
  for (const k of Object.keys(params)) {
    if (!allowed.includes(k)) {
      throw invalid(`Received unknown parameter: ${k}`, k, 'parameter_unknown');
    }
  }
}
