/**
 * `@cyclone/http`: any HTTP API that takes an idempotency key, from Cyclone handlers. A `fetch`
 * whose mutating requests carry the step's key and run under the durable ledger guard of
 * `@cyclone/idempotency`, presets for APIs that document a key, and (in
 * `@cyclone/http/testing`) a local fake of such an API.
 */
export { type ClassifySemantics, classifyHttpError, DRAFT_SEMANTICS } from './classify.js';
export { deadlineFetch } from './deadline-fetch.js';
export {
  HttpKeyInUseError,
  HttpResponseError,
  UnsupportedBodyError,
  type UnsupportedBodyKind,
} from './errors.js';
export {
  DEFAULT_TIMEOUT_MS,
  type HttpUnknownPolicy,
  type IdempotentFetch,
  type IdempotentFetchOptions,
  idempotentFetch,
  replayWindowMs,
} from './idempotent-fetch.js';
export { fitKey, formatKey, type KeyFormat, MIN_HTTP_KEY_LIMIT } from './keys.js';
export { type HttpPreset, type MismatchRule, type PresetName, presets } from './presets.js';
export {
  DEFAULT_KEPT_HEADERS,
  REPLAYED_HEADER,
  type StoredResponse,
} from './stored-response.js';
