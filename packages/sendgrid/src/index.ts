export { classifySendGridError, isSendGridResponseError } from './classify.js';
export {
  type IdempotentMail,
  type IdempotentMailOptions,
  idempotentMail,
  type MailUnknownPolicy,
  type SentMail,
} from './idempotent-mail.js';
export {
  createMailService,
  DEFAULT_MAIL_TIMEOUT_MS,
  type MailServiceOptions,
} from './mail-service.js';
export {
  EVENT_SIGNATURE_HEADER,
  EVENT_TIMESTAMP_HEADER,
  type EventWebhookOptions,
  type EventWebhookRequest,
  type EventWebhookResult,
  eventsForKey,
  eventWebhookListener,
  handleEventWebhook,
  type RecordedEvent,
  verifyEventWebhookSignature,
} from './reconcile.js';
export { migrateSendgrid, type Queryable, type SendgridDb } from './tables.js';
