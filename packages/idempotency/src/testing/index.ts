/**
 * `@cyclone/idempotency/testing`: the base of local fake providers for testing idempotent calls:
 * a loopback HTTP server on 127.0.0.1, and a recording, fault-injecting fake
 * on it (error statuses, reset connections, delayed answers, each with or without the effect;
 * refused connections) whose subclasses count the provider's real effects. The adapters' fakes
 * (`@cyclone/sendgrid/testing`, `@cyclone/twilio/testing`, `@cyclone/stripe/testing`) are built
 * on it. For tests only; it never reaches the network.
 */
export {
  type Exchange,
  type Fault,
  type FaultHandle,
  type FaultOptions,
  LoopbackFake,
  type RecordedRequest,
  type RouteResponse,
  runWithFault,
} from './loopback-fake.js';
export {
  LoopbackHttpServer,
  type LoopbackHttpServerOptions,
  type RequestHandler,
} from './loopback-http-server.js';
