/**
 * The faults `FakeStripe` injects — `@cyclone/idempotency/testing`'s `Fault` kinds, plus Stripe's
 * `hold`, each applied at the stage of a request where it happens in real life (`stageOf`) — and
 * the record of a request they match on.
 */
import type {
  Fault,
  FaultOptions,
  FaultHandle as LoopbackFaultHandle,
  RecordedRequest as LoopbackRecordedRequest,
} from '@cyclone/idempotency/testing';
import type { FormParams } from './form.js';
import type { StripeRoute } from './resources/routes.js';

/** A `status` fault as Stripe's layers see it: answered before or after the idempotency layer. */
export type StripeStatusFault = Extract<Fault, { kind: 'status' }> & {
  /**
   * Whether the request reached execution, so its answer is stored under the key and replayed.
   * Default: when `commit` is set, and for 402 and 5xx. `commit` applies only to an executed one.
   */
  executed?: boolean;
};

/**
 * A fault to inject: `@cyclone/idempotency/testing`'s `Fault`, plus Stripe's `hold`. Each
 * applies at the stage where it happens in real life:
 * - `{ kind: 'reset', commit: false }`: on arrival, in front of the idempotency layer: the
 *   socket is destroyed, nothing runs, nothing is stored (the client sees `ECONNRESET`). For a
 *   refused *connection* (`ECONNREFUSED`) use `refuseConnections()`.
 * - `{ kind: 'status' }` not executed (the default for 401, 429 and other 4xx): answered on
 *   arrival, not stored. Executed (the default for 402 and 5xx, and with `commit`): answered
 *   after the key is claimed; with `commit: true` the effect happens first (a 500 after the
 *   charge); the answer is stored under the key and replayed. `body` replaces Stripe's error body
 *   for the status, `headers` are added (`stripe-should-retry: false` steers the SDK's retries).
 * - `{ kind: 'reset', commit: true }`: applies to the answer: whatever the request did
 *   (executed and stored, replayed, 409, …) is done, then the socket is destroyed instead of
 *   answering: the "lost response".
 * - `{ kind: 'delay', ms }`: applies to the answer likewise: the work is done (and stored), then
 *   the answer waits `ms` (past the client's timeout, the client gives up). With
 *   `commit: false` the wait comes on arrival instead, before anything runs.
 * - `{ kind: 'hold' }`: the key is claimed in flight and the request waits for
 *   `FaultHandle.release()`, then executes normally. Meanwhile the same key gets `409`.
 */
export type StripeFault = Exclude<Fault, { kind: 'status' }> | StripeStatusFault | { kind: 'hold' };

/** Which requests a fault applies to (`LoopbackFake`'s conditions, plus the key). */
export interface StripeFaultOptions extends FaultOptions<StripeRoute, RecordedRequest> {
  /** Only requests with this `Idempotency-Key`, exact or a RegExp. */
  idempotencyKey?: string | RegExp;
}

/** Control of an injected fault. */
export interface FaultHandle extends LoopbackFaultHandle {
  /** For `hold`: lets held requests (and later ones) go on. */
  release(): void;
  /** Withdraws the fault (held requests are released). */
  remove(): void;
}

/**
 * What happened to a recorded request: `pending` (not answered yet, e.g. held), `executed` (ran;
 * a success or an executed, stored failure such as a decline), `replayed` (the stored response
 * of its key), `conflict` (409, key in flight), `idempotency_mismatch` (400, key used with other
 * parameters), `invalid` (a validation error, not stored), `unauthorized` (401), `fault` (an
 * injected status, reset or delay decided the answer), `refused` (socket destroyed on arrival).
 */
export type RequestOutcome =
  | 'pending'
  | 'executed'
  | 'replayed'
  | 'conflict'
  | 'idempotency_mismatch'
  | 'invalid'
  | 'unauthorized'
  | 'fault'
  | 'refused';

/** One request as the fake saw it: `LoopbackFake`'s record, plus what Stripe made of it. */
export interface RecordedRequest extends LoopbackRecordedRequest<StripeFault['kind']> {
  /** Decoded parameters (body for POST, query for GET). */
  params: FormParams;
  /** The `Idempotency-Key` header, if any. */
  idempotencyKey: string | undefined;
  /** The bearer API key, if any. */
  apiKey: string | undefined;
  /** The status answered; undefined when the socket was dropped or the request is still open. */
  status: number | undefined;
  outcome: RequestOutcome;
  /** The fake's `request-id` of this request. */
  requestId: string;
}

/** The stages of a request where a fault can apply. */
export type Stage = 'arrival' | 'execution' | 'response';

/** Where a fault applies (see `StripeFault`). */
export function stageOf(f: StripeFault): Stage {
  switch (f.kind) {
    case 'reset':
      return f.commit ? 'response' : 'arrival';
    case 'delay':
      return f.commit === false ? 'arrival' : 'response';
    case 'status':
      return isExecuted(f) ? 'execution' : 'arrival';
    case 'hold':
      return 'execution';
  }
}

/** Whether a `status` fault reached execution (see `StripeStatusFault.executed`). */
export function isExecuted(f: StripeStatusFault): boolean {
  return f.executed ?? (f.commit === true || f.status === 402 || f.status >= 500);
}
