/**
 * `@cyclone/http/testing`: a local API that takes an idempotency key (`FakeHttpApi`), with the
 * IETF draft's semantics or a preset's (`FAKE_PROFILES`), the fault kinds of
 * `@cyclone/idempotency/testing` (plus `hold`), request recording and a count of real effects.
 * For tests and demos only; it never reaches the network.
 */
export type { RouteResponse } from '@cyclone/idempotency/testing';
export {
  type Effect,
  FakeHttpApi,
  type FakeHttpApiOptions,
  type FakeHttpRoute,
  type FaultHandle,
  type HttpFault,
  type HttpFaultOptions,
  parseSfString,
  type RecordedRequest,
  type RequestOutcome,
  type Responder,
} from './fake-http-api.js';
export { FAKE_PROFILES, type FakeProfile } from './profiles.js';
