/**
 * How the fake's server side keeps idempotency keys, per API: the IETF draft's semantics and the
 * differences the presets' documentation describes. Where a provider documents nothing (an
 * answer for a request in flight, a key reused with another body), the fake takes the behaviour
 * its docs imply for a repeated key — it waits for the first request and replays its answer —
 * and says so here.
 */
import { type PresetName, presets } from '../presets.js';

/** The server-side semantics of one API (see `FakeHttpApi`). */
export interface FakeProfile {
  name: string;
  /** The request header carrying the key (absent with `keyField`). */
  keyHeader?: string;
  /** The top-level JSON body field carrying the key. */
  keyField?: string;
  /** `sf-string`: the header must be an RFC 8941 String (`"…"`), else 400. */
  keyFormat: 'token' | 'sf-string';
  /** Longer keys get 400. */
  maxKeyLength?: number;
  /** Keys older than this (on the fake's clock) are forgotten. Default: never. */
  retentionMs?: number;
  /** A request whose key is in flight: `409` (`conflict`) or a wait for the first (`wait`). */
  inFlight: 'conflict' | 'wait';
  /** The key with another request: an error (`reject`, `mismatchStatus`) or the first answer. */
  onMismatch: 'reject' | 'replay';
  mismatchStatus: number;
  /** Executed error answers (a committed 5xx fault, a 4xx of the route) are stored and replayed. */
  storesErrors: boolean;
  /** Extra headers on a replayed answer. */
  replayHeaders: Record<string, string>;
  /** The answer echoes the key in its key header (Adyen). */
  echoKey: boolean;
}

/** The profiles, by preset name, plus `draft`: `idempotentFetch`'s semantics without a preset. */
export const FAKE_PROFILES: Readonly<Record<PresetName | 'draft', FakeProfile>> = Object.freeze({
  // The draft: 409 in flight, 422 mismatch, success or error replayed; the key as a bare token,
  // as idempotentFetch sends it without a preset.
  draft: {
    name: 'draft',
    keyHeader: 'Idempotency-Key',
    keyFormat: 'token',
    inFlight: 'conflict',
    onMismatch: 'reject',
    mismatchStatus: 422,
    storesErrors: true,
    replayHeaders: { 'idempotent-replayed': 'true' },
    echoKey: false,
  },
  ietf: {
    name: 'ietf',
    keyHeader: presets.ietf.keyHeader,
    keyFormat: 'sf-string',
    inFlight: 'conflict',
    onMismatch: 'reject',
    mismatchStatus: 422,
    storesErrors: true,
    replayHeaders: {},
    echoKey: false,
  },
  // "Returns the latest status of the previous request" (the fake: its stored answer); a 5xx is
  // not stored (it may be retried while the ID is kept); in flight: not documented (waits).
  paypal: {
    name: 'paypal',
    keyHeader: presets.paypal.keyHeader,
    keyFormat: 'token',
    maxKeyLength: presets.paypal.maxKeyLength,
    retentionMs: presets.paypal.keyRetentionMs,
    inFlight: 'wait',
    onMismatch: 'replay',
    mismatchStatus: 422,
    storesErrors: false,
    replayHeaders: {},
    echoKey: false,
  },
  // "The response to the first attempt will be returned", the key echoed in the response.
  adyen: {
    name: 'adyen',
    keyHeader: presets.adyen.keyHeader,
    keyFormat: 'token',
    maxKeyLength: presets.adyen.maxKeyLength,
    retentionMs: presets.adyen.keyRetentionMs,
    inFlight: 'wait',
    onMismatch: 'replay',
    mismatchStatus: 422,
    storesErrors: false,
    replayHeaders: {},
    echoKey: true,
  },
  // The key in the body; the first successful response replayed; a changed request is an error
  // (the fake's body names IDEMPOTENCY_KEY_REUSED; Square's page names no code).
  square: {
    name: 'square',
    keyField: presets.square.keyField,
    keyFormat: 'token',
    maxKeyLength: presets.square.maxKeyLength,
    inFlight: 'wait',
    onMismatch: 'reject',
    mismatchStatus: 400,
    storesErrors: false,
    replayHeaders: {},
    echoKey: false,
  },
  // Status and body of the first request stored, success or failure (400 and 500 included).
  easyship: {
    name: 'easyship',
    keyHeader: presets.easyship.keyHeader,
    keyFormat: 'token',
    retentionMs: presets.easyship.keyRetentionMs,
    inFlight: 'wait',
    onMismatch: 'replay',
    mismatchStatus: 422,
    storesErrors: true,
    replayHeaders: {},
    echoKey: false,
  },
});

/** The fake's error body for a status: problem+json, or Square's `errors` array. */
export function errorBody(profile: FakeProfile, status: number, title: string, detail: string) {
  if (profile.name === 'square') {
    return {
      errors: [
        { category: status >= 500 ? 'API_ERROR' : 'INVALID_REQUEST_ERROR', code: title, detail },
      ],
    };
  }
  return { type: 'about:blank', title, status, detail };
}
