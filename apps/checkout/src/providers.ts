/**
 * The providers a checkout step calls, each either the real service or its local fake:
 *
 * | provider | real when                                        | else the fake at                   |
 * | -------- | ------------------------------------------------ | ---------------------------------- |
 * | Stripe   | `STRIPE_SECRET_KEY`                              | `FAKE_STRIPE_URL`                  |
 * | SendGrid | `SENDGRID_API_KEY` (+ `SENDGRID_FROM`)           | `FAKE_SENDGRID_URL`                |
 * | Twilio   | `TWILIO_ACCOUNT_SID` + `TWILIO_AUTH_TOKEN` (+ `TWILIO_FROM`) | `FAKE_TWILIO_URL`      |
 * | shipping | `SHIPPING_API_URL` (+ `SHIPPING_API_TOKEN`)      | `FAKE_SHIPPING_URL` (else none)    |
 *
 * The shipping API is any API that takes an idempotency key, called through `@cyclone/http`
 * with the Easyship preset; without one configured, `fulfil` ships nothing.
 *
 * The `FAKE_*_URL` variables are set by `pnpm demo`; without them the fakes started by
 * `pnpm --filter @cyclone/example-checkout fakes` are found through the file it writes
 * (`.cyclone/checkout-fakes.json`).
 *
 * Against the fakes, timeouts and quiet periods are short (the fakes answer in milliseconds and
 * the demo delivers their webhooks at once); against the real services they are the adapters'
 * defaults, which are sized for the real networks.
 */
import { existsSync, readFileSync } from 'node:fs';
import type { IdempotentFetchOptions } from '@cyclone/http';
import type { IdempotentMailOptions } from '@cyclone/sendgrid';
import { createMailService } from '@cyclone/sendgrid';
import type { IdempotentStripeOptions } from '@cyclone/stripe';
import type { IdempotentTwilioOptions, TwilioMessagingClient } from '@cyclone/twilio';
import { LoopbackRequestClient } from '@cyclone/twilio/testing';
import Stripe from 'stripe';
import twilio from 'twilio';
import { cycloneDir } from './db.js';

/** Credentials the fakes accept (they are local test servers: nothing secret). */
export const FAKE_CREDENTIALS = {
  stripeKey: 'sk_test_cyclone_fake',
  sendgridKey: 'SG.test',
  twilioAccountSid: `AC${'0'.repeat(31)}1`,
  twilioAuthToken: 'cyclone-fake-twilio-auth-token',
  sender: 'shop@example.com',
  smsFrom: '+15005550006',
} as const;

/** Where the fakes listen, as `pnpm … fakes` writes it and `pnpm demo` passes it on. */
export interface FakeUrls {
  stripe: string;
  sendgrid: string;
  twilio: string;
  /** The shipping API fake (absent in a fakes file written before it existed). */
  shipping?: string;
  /** The public key the SendGrid fake signs its Event Webhook posts with (base64 DER). */
  sendgridVerificationKey?: string;
  /** When the Stripe fake started (ISO): it holds no payment of an order made before. */
  stripeStartedAt?: string;
}

/** The file the standalone fakes process writes its URLs to. */
export const fakesFile = () => `${cycloneDir()}/checkout-fakes.json`;

export type MailService = ReturnType<typeof createMailService>;

/** The configured clients and the adapters' options. */
export interface Providers {
  stripe: Stripe;
  stripeOptions: IdempotentStripeOptions;
  /**
   * Since when this Stripe account takes the shop's payments, if known: the reconciliation does
   * not look for older orders' payments there (each fake is a new account).
   */
  stripeAccountSince?: Date;
  mail: MailService;
  mailOptions: IdempotentMailOptions;
  mailFrom: string;
  twilio: TwilioMessagingClient;
  twilioOptions: IdempotentTwilioOptions;
  smsFrom: string;
  /** The shipping API: its base URL, bearer token and `idempotentFetch` options; none: no call. */
  shipping?: { url: string; token?: string; options: IdempotentFetchOptions };
  /** One line per provider, e.g. `stripe: the fake at http://127.0.0.1:40123`. */
  describe: string[];
}

type Env = Record<string, string | undefined>;

/** Which providers are the real services, by the environment alone. */
export function realProviders(env: Env = process.env) {
  return {
    stripe: Boolean(env.STRIPE_SECRET_KEY),
    sendgrid: Boolean(env.SENDGRID_API_KEY),
    twilio: Boolean(env.TWILIO_ACCOUNT_SID && env.TWILIO_AUTH_TOKEN),
  };
}

/**
 * Where the fakes are: the `FAKE_*_URL` variables, else the standalone fakes' file.
 * @throws Error saying how to start them when neither is there.
 */
export function fakeUrls(env: Env = process.env): FakeUrls {
  if (env.FAKE_STRIPE_URL && env.FAKE_SENDGRID_URL && env.FAKE_TWILIO_URL) {
    return {
      stripe: env.FAKE_STRIPE_URL,
      sendgrid: env.FAKE_SENDGRID_URL,
      twilio: env.FAKE_TWILIO_URL,
      ...(env.FAKE_SHIPPING_URL ? { shipping: env.FAKE_SHIPPING_URL } : {}),
      sendgridVerificationKey: env.SENDGRID_WEBHOOK_VERIFICATION_KEY,
      ...(env.FAKE_STRIPE_STARTED_AT ? { stripeStartedAt: env.FAKE_STRIPE_STARTED_AT } : {}),
    };
  }
  const file = fakesFile();
  if (existsSync(file)) return JSON.parse(readFileSync(file, 'utf8')) as FakeUrls;
  throw new Error(
    `no provider keys and no fakes: start the fakes with \`pnpm --filter @cyclone/example-checkout fakes\` (they write ${file}), set FAKE_STRIPE_URL, FAKE_SENDGRID_URL and FAKE_TWILIO_URL, or set the real providers' keys (see apps/checkout/README.md)`,
  );
}

/**
 * The providers for this process's environment.
 * @throws Error when a real provider lacks a setting (SENDGRID_FROM, TWILIO_FROM), or a fake is
 *   needed and none can be found.
 */
export function providersFromEnv(env: Env = process.env): Providers {
  const real = realProviders(env);
  const fakes = real.stripe && real.sendgrid && real.twilio ? undefined : fakeUrls(env);
  const describe: string[] = [];
  // Twilio status callbacks need a URL Twilio can reach: the API's public origin.
  const statusCallback = env.PUBLIC_URL
    ? new URL('/hooks/twilio/status', env.PUBLIC_URL).toString()
    : undefined;

  let stripe: Stripe;
  let stripeOptions: IdempotentStripeOptions;
  let stripeAccountSince: Date | undefined;
  if (real.stripe) {
    stripe = new Stripe(env.STRIPE_SECRET_KEY as string, { maxNetworkRetries: 2, timeout: 30_000 });
    stripeOptions = {};
    describe.push('stripe: the real Stripe API (STRIPE_SECRET_KEY)');
  } else {
    const u = new URL((fakes as FakeUrls).stripe);
    stripe = new Stripe(FAKE_CREDENTIALS.stripeKey, {
      host: u.hostname,
      port: Number(u.port),
      protocol: 'http',
      telemetry: false,
      // No SDK-level retry: a lost response becomes an unknown outcome that Cyclone's ledger
      // settles on the next attempt (the demo shows it), rather than a silent SDK retry.
      maxNetworkRetries: 0,
      timeout: 5_000,
    });
    stripeOptions = {};
    const started = (fakes as FakeUrls).stripeStartedAt;
    if (started) stripeAccountSince = new Date(started);
    describe.push(`stripe: the fake at ${u.origin}`);
  }

  let mail: MailService;
  let mailOptions: IdempotentMailOptions;
  let mailFrom: string;
  if (real.sendgrid) {
    mailFrom = required(env, 'SENDGRID_FROM', 'a verified sender for SENDGRID_API_KEY');
    mail = createMailService({ apiKey: env.SENDGRID_API_KEY as string, timeoutMs: 10_000 });
    // An unknown outcome is settled from the Event Webhook (POST /hooks/sendgrid); without one
    // it stops for an operator rather than risk a second e-mail.
    mailOptions = { onUnknown: 'reconcile' };
    describe.push(`sendgrid: the real SendGrid API (SENDGRID_API_KEY), from ${mailFrom}`);
  } else {
    const base = (fakes as FakeUrls).sendgrid;
    mailFrom = FAKE_CREDENTIALS.sender;
    mail = createMailService({
      apiKey: FAKE_CREDENTIALS.sendgridKey,
      baseUrl: base.endsWith('/') ? base : `${base}/`,
      timeoutMs: 2_000,
    });
    // The fake accepts an e-mail the moment the request arrives, and the demo delivers its
    // events to the webhook every half second: after an 8 s quiet period, an e-mail with no
    // event was never accepted and is sent again (reconciliation runs once the quiet period is
    // over, so the two are equal). The margin covers a loaded machine.
    mailOptions = { onUnknown: 'reconcile', quietPeriodMs: 8_000, assumeNotSentAfterMs: 8_000 };
    describe.push(`sendgrid: the fake at ${new URL(base).origin}`);
  }

  let sms: TwilioMessagingClient;
  let twilioOptions: IdempotentTwilioOptions;
  let smsFrom: string;
  if (real.twilio) {
    smsFrom = required(env, 'TWILIO_FROM', 'a Twilio number or Messaging Service to send from');
    sms = twilio(env.TWILIO_ACCOUNT_SID, env.TWILIO_AUTH_TOKEN, { timeout: 10_000 });
    twilioOptions = { onUnknown: 'reconcile', statusCallback };
    describe.push(`twilio: the real Twilio API (TWILIO_ACCOUNT_SID), from ${smsFrom}`);
  } else {
    const origin = new URL((fakes as FakeUrls).twilio).origin;
    smsFrom = FAKE_CREDENTIALS.smsFrom;
    sms = twilio(FAKE_CREDENTIALS.twilioAccountSid, FAKE_CREDENTIALS.twilioAuthToken, {
      httpClient: new LoopbackRequestClient(origin, { timeout: 2_000, autoRetry: false }),
    });
    // The fake creates (and lists) a message the moment the request arrives, and the client
    // gives up after 2 s: after a 5 s quiet period, a message that is not there was never
    // created and is sent again.
    twilioOptions = {
      onUnknown: 'reconcile',
      statusCallback,
      quietPeriodMs: 5_000,
      assumeNotSentAfterMs: 5_000,
    };
    describe.push(`twilio: the fake at ${origin}`);
  }

  let shipping: Providers['shipping'];
  const shippingFake = fakes?.shipping ?? env.FAKE_SHIPPING_URL;
  if (env.SHIPPING_API_URL) {
    shipping = {
      url: env.SHIPPING_API_URL,
      ...(env.SHIPPING_API_TOKEN ? { token: env.SHIPPING_API_TOKEN } : {}),
      options: { preset: 'easyship' },
    };
    describe.push(`shipping: ${new URL(env.SHIPPING_API_URL).origin} (SHIPPING_API_URL)`);
  } else if (shippingFake) {
    // The fake answers in milliseconds: a short timeout, and a quiet period just above it.
    shipping = {
      url: shippingFake,
      options: { preset: 'easyship', timeoutMs: 2_000, quietPeriodMs: 3_000 },
    };
    describe.push(`shipping: the fake at ${new URL(shippingFake).origin}`);
  } else {
    describe.push('shipping: none configured (fulfil ships nothing)');
  }

  return {
    stripe,
    stripeOptions,
    ...(stripeAccountSince ? { stripeAccountSince } : {}),
    mail,
    mailOptions,
    mailFrom,
    twilio: sms,
    twilioOptions,
    smsFrom,
    ...(shipping ? { shipping } : {}),
    describe,
  };
}

/** The auth token Twilio signs status callbacks with: the real one, else the fake's. */
export function twilioAuthToken(env: Env = process.env): string {
  return realProviders(env).twilio
    ? (env.TWILIO_AUTH_TOKEN as string)
    : FAKE_CREDENTIALS.twilioAuthToken;
}

/** The SendGrid Event Webhook verification key: configured, else the fake's (if it signs). */
export function sendgridVerificationKey(env: Env = process.env): string | undefined {
  if (env.SENDGRID_WEBHOOK_VERIFICATION_KEY) return env.SENDGRID_WEBHOOK_VERIFICATION_KEY;
  if (realProviders(env).sendgrid) return undefined;
  try {
    return fakeUrls(env).sendgridVerificationKey || undefined;
  } catch {
    return undefined;
  }
}

function required(env: Env, name: string, what: string): string {
  const v = env[name];
  if (!v) throw new Error(`${name} is not set: it must name ${what}`);
  return v;
}
