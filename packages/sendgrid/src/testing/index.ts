export {
  type AcceptedMail,
  FakeSendGrid,
  type FakeSendGridOptions,
  type SendGridEvent,
  type SendGridRoute,
  sendGridErrorBody,
  type WebhookDelivery,
} from './fake-sendgrid.js';
export type { Fault, FaultOptions, RecordedRequest } from './http.js';
