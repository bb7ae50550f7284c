export type { Fault, FaultOptions, RecordedRequest } from '@cyclone/idempotency/testing';
export {
  defaultTwilioError,
  type FakeMessage,
  FakeTwilio,
  type FakeTwilioOptions,
  type MessageStatus,
  rfc2822,
  type StatusCallbackDelivery,
  type TwilioRoute,
  twilioError,
  twilioProblem,
  twilioSignature,
} from './fake-twilio.js';
export { LoopbackRequestClient, type LoopbackRequestClientOptions } from './loopback-client.js';
