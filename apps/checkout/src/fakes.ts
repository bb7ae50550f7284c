/**
 * The local fakes (the adapters' `./testing` exports): Stripe, SendGrid, Twilio and a shipping
 * API (`@cyclone/http`'s, with Easyship's key semantics) on 127.0.0.1, each keeping its
 * provider's semantics and counting the real effects (charges, e-mails, SMS, shipments). Used by
 * `pnpm demo` (in its own process, so it can count and inject faults)
 * and by `pnpm --filter @cyclone/example-checkout fakes` (standalone, for the API and workers
 * run by hand).
 */
import { FakeHttpApi } from '@cyclone/http/testing';
import { FakeSendGrid } from '@cyclone/sendgrid/testing';
import { FakeStripe } from '@cyclone/stripe/testing';
import { FakeTwilio } from '@cyclone/twilio/testing';
import { FAKE_CREDENTIALS, type FakeUrls } from './providers.js';

export interface Fakes {
  stripe: FakeStripe;
  sendgrid: FakeSendGrid;
  twilio: FakeTwilio;
  shipping: FakeHttpApi;
  urls: FakeUrls;
  /** The variables that point the API and the workers at these fakes. */
  env: Record<string, string>;
  close(): Promise<void>;
}

/** Starts the fakes on free ports. */
export async function startFakes(): Promise<Fakes> {
  const stripeStartedAt = new Date().toISOString();
  const stripe = await FakeStripe.start();
  const sendgrid = await FakeSendGrid.start({
    apiKey: FAKE_CREDENTIALS.sendgridKey,
    signEvents: true, // so the API's webhook checks real signatures
  });
  const twilio = await FakeTwilio.start({
    accountSid: FAKE_CREDENTIALS.twilioAccountSid,
    authToken: FAKE_CREDENTIALS.twilioAuthToken,
    autoAdvance: 'sent', // a created message is sent at once and calls its status callback
  });
  const shipping = await FakeHttpApi.start({ profile: 'easyship' });
  const urls: FakeUrls = {
    stripe: stripe.url,
    sendgrid: sendgrid.baseUrl,
    twilio: twilio.origin,
    shipping: shipping.url,
    sendgridVerificationKey: sendgrid.verificationKey,
    stripeStartedAt,
  };
  return {
    stripe,
    sendgrid,
    twilio,
    shipping,
    urls,
    env: {
      FAKE_STRIPE_URL: urls.stripe,
      FAKE_SENDGRID_URL: urls.sendgrid,
      FAKE_TWILIO_URL: urls.twilio,
      FAKE_SHIPPING_URL: shipping.url,
      SENDGRID_WEBHOOK_VERIFICATION_KEY: sendgrid.verificationKey,
      FAKE_STRIPE_STARTED_AT: stripeStartedAt,
    },
    async close() {
      await Promise.allSettled([
        stripe.close(),
        sendgrid.close(),
        twilio.close(),
        shipping.close(),
      ]);
    },
  };
}

/**
 * SendGrid posts Event Webhook events (`processed`, `delivered`) for every accepted e-mail
 * within seconds; the fake posts them when asked. This asks every `intervalMs`, for the e-mails
 * accepted since the last time, to `url` (the API's `/hooks/sendgrid`). A failed post is tried
 * again next time. Returns a function that stops it (after one last delivery).
 */
export function pumpSendgridEvents(
  fake: FakeSendGrid,
  url: string,
  intervalMs = 500,
): () => Promise<void> {
  let delivered = 0;
  let stopped = false;
  let running: Promise<void> = Promise.resolve();
  const tick = async () => {
    const end = fake.sent.length;
    if (end === delivered) return;
    const d = await fake.deliverEvents(url, { mails: fake.sent.slice(delivered, end) });
    if (d.status === 200) delivered = end;
  };
  const timer = setInterval(() => {
    running = running.then(tick).catch(() => {});
  }, intervalMs);
  return async () => {
    if (stopped) return;
    stopped = true;
    clearInterval(timer);
    await running;
    await tick().catch(() => {});
  };
}
