export { classifyTwilioError, isTwilioHttpError } from './classify.js';
export { installDeadline } from './deadline.js';
export {
  type IdempotentTwilio,
  type IdempotentTwilioOptions,
  idempotentTwilio,
  type SentSms,
  type SmsUnknownPolicy,
  type TwilioMessagingClient,
  toSentSms,
  twilioQuietPeriodMs,
} from './idempotent-twilio.js';
export {
  callbacksForKey,
  handleStatusCallback,
  KEY_PARAM,
  MAX_CALLBACK_URL_LENGTH,
  type RecordedCallback,
  type StatusCallbackListenerOptions,
  type StatusCallbackOptions,
  type StatusCallbackRequest,
  type StatusCallbackResult,
  statusCallbackListener,
  statusCallbackUrl,
} from './reconcile.js';
export { migrateTwilio, type Queryable, type TwilioDb } from './tables.js';
