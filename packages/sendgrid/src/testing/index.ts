export type { Fault, FaultOptions, RecordedRequest } from '@cyclone/idempotency/testing';
export {
  type AcceptedMail,
  FakeSendGrid,
  type FakeSendGridOptions,
  type SendGridEvent,
  type SendGridRoute,
  sendGridErrorBody,
  type WebhookDelivery,
} from './fake-sendgrid.js';
