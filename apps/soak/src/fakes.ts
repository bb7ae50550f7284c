/**
 * The three provider fakes (the adapters' `./testing` exports), run in the orchestrator so that
 * it can inject their faults and count their real effects per idempotency key. Also the
 * SendGrid Event Webhook: the fake's events are posted every few hundred ms to a local
 * `eventWebhookListener` that records them in the soak database, which is what the SendGrid
 * adapter's `'reconcile'` policy reads after an unknown outcome.
 *
 * Credentials are random and secret-shaped (`sk_test_…`, `SG.….…`, a 32-hex auth token): the
 * checker then looks for them in every stored error, output, ledger row and worker log.
 */
import { randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { eventWebhookListener } from '@cyclone/sendgrid';
import { FakeSendGrid } from '@cyclone/sendgrid/testing';
import { FakeStripe, type FaultHandle } from '@cyclone/stripe/testing';
import { FakeTwilio } from '@cyclone/twilio/testing';
import type pg from 'pg';
import type { Provider } from './workload.js';

/** The provider fault kinds of the issue: effect then dropped connection, 5xx, 429, slow. */
export const PROVIDER_FAULTS = ['drop_after_effect', 'http_5xx', 'http_429', 'slow'] as const;
export type ProviderFault = (typeof PROVIDER_FAULTS)[number];

/** Secrets the workers use (and the checker hunts for). */
export interface Credentials {
  stripeKey: string;
  sendgridKey: string;
  twilioSid: string;
  twilioToken: string;
}

export interface Fakes {
  stripe: FakeStripe;
  sendgrid: FakeSendGrid;
  twilio: FakeTwilio;
  credentials: Credentials;
  /** What the workers need to reach the fakes. */
  env: Record<string, string>;
  /**
   * Queues `fault` for the next `times` mutating requests to `provider`.
   * @returns a function giving how many requests it has hit so far.
   */
  inject(provider: Provider, fault: ProviderFault, times: number, timeoutMs: number): () => number;
  clearFaults(): void;
  /** Effects (objects, e-mails, messages) per idempotency key, generation suffix removed. */
  effectsByKey(): Map<string, { provider: Provider; effects: number; requests: number }>;
  /** Event Webhook deliveries that failed so far (e.g. while PostgreSQL was down). */
  readonly webhookFailures: number;
  /** Delivers the events not yet delivered, now. */
  flushEvents(): Promise<void>;
  close(): Promise<void>;
}

/** Starts the fakes and the SendGrid webhook pump on `pool` (the soak database). */
export async function startFakes(pool: pg.Pool): Promise<Fakes> {
  const credentials: Credentials = {
    stripeKey: `sk_test_soak${randomBytes(12).toString('hex')}`,
    sendgridKey: `SG.${randomBytes(16).toString('base64url')}.${randomBytes(32).toString('base64url')}`,
    twilioSid: `AC${randomBytes(16).toString('hex')}`,
    twilioToken: randomBytes(16).toString('hex'),
  };
  const stripe = await FakeStripe.start();
  const sendgrid = await FakeSendGrid.start({ apiKey: credentials.sendgridKey, signEvents: true });
  const twilio = await FakeTwilio.start({
    accountSid: credentials.twilioSid,
    authToken: credentials.twilioToken,
    autoAdvance: 'sent', // listed (by DateSent) at once: the adapter's reconcile can find it
  });

  // The Event Webhook, on a loopback port of ours.
  const onEvents = eventWebhookListener({ pool, verificationKey: sendgrid.verificationKey });
  const hook: Server = createServer((req, res) => void onEvents(req, res));
  await new Promise<void>((r) => hook.listen(0, '127.0.0.1', r));
  const hookUrl = `http://127.0.0.1:${(hook.address() as AddressInfo).port}/hooks/sendgrid`;
  let delivered = 0;
  let webhookFailures = 0;
  let pumping: Promise<void> = Promise.resolve();
  const pumpOnce = async () => {
    const end = sendgrid.sent.length;
    if (end === delivered) return;
    const d = await sendgrid.deliverEvents(hookUrl, { mails: sendgrid.sent.slice(delivered, end) });
    if (d.status === 200) delivered = end;
    else webhookFailures++;
  };
  const pump = () => {
    pumping = pumping.then(pumpOnce).catch(() => {
      webhookFailures++;
    });
    return pumping;
  };
  const timer = setInterval(() => void pump(), 300);

  const stripeHandles: FaultHandle[] = [];

  return {
    stripe,
    sendgrid,
    twilio,
    credentials,
    env: {
      SOAK_STRIPE_URL: stripe.url,
      SOAK_STRIPE_KEY: credentials.stripeKey,
      SOAK_SENDGRID_URL: sendgrid.baseUrl,
      SOAK_SENDGRID_KEY: credentials.sendgridKey,
      SOAK_TWILIO_URL: twilio.origin,
      SOAK_TWILIO_SID: credentials.twilioSid,
      SOAK_TWILIO_TOKEN: credentials.twilioToken,
    },
    get webhookFailures() {
      return webhookFailures;
    },
    inject(provider, fault, times, timeoutMs) {
      const slowMs = timeoutMs + 500; // past the client's timeout: the answer is lost
      // The 5xx comes after the effect half of the time. Stripe's 500 reached execution (its
      // default for 5xx): the answer is stored under the key and replayed.
      const f =
        fault === 'drop_after_effect'
          ? ({ kind: 'reset', commit: true } as const)
          : fault === 'http_5xx'
            ? ({
                kind: 'status',
                status: provider === 'stripe' ? 500 : 503,
                commit: Math.random() < 0.5,
              } as const)
            : fault === 'http_429'
              ? ({ kind: 'status', status: 429 } as const)
              : ({ kind: 'delay', ms: slowMs, commit: true } as const);
      if (provider === 'stripe') {
        const h = stripe.inject(f, { method: 'POST', path: '/v1/payment_intents', times });
        stripeHandles.push(h);
        return () => h.hits;
      }
      const h =
        provider === 'sendgrid'
          ? sendgrid.inject(f, { times })
          : twilio.inject(f, { route: 'create', times });
      return () => h.hits;
    },
    clearFaults() {
      for (const h of stripeHandles) h.remove();
      sendgrid.clearFaults();
      twilio.clearFaults();
    },
    effectsByKey() {
      const out = new Map<string, { provider: Provider; effects: number; requests: number }>();
      const bump = (key: string | undefined, provider: Provider, what: 'effects' | 'requests') => {
        if (!key) return;
        const base = key.replace(/#g\d+$/, '');
        const e = out.get(base) ?? { provider, effects: 0, requests: 0 };
        e[what]++;
        out.set(base, e);
      };
      // Stripe: one payment intent per executed create (a declined one exists too).
      for (const e of stripe.effects) {
        if (e.type === 'payment_intent') bump(e.idempotencyKey, 'stripe', 'effects');
      }
      for (const r of stripe.requestsTo('POST', '/v1/payment_intents')) {
        bump(r.idempotencyKey, 'stripe', 'requests');
      }
      // SendGrid: accepted e-mails, by their custom_args.cyclone_key.
      for (const m of sendgrid.sent) bump(m.customArgs.cyclone_key, 'sendgrid', 'effects');
      for (const r of sendgrid.sendRequests) {
        const args = (r.json as { custom_args?: Record<string, string> } | undefined)?.custom_args;
        bump(args?.cyclone_key, 'sendgrid', 'requests');
      }
      // Twilio: created messages, by the key in their body.
      const keyOf = (body: string | null | undefined) =>
        body?.startsWith('soak ') ? body.slice(5) : undefined;
      for (const m of twilio.created) bump(keyOf(m.body), 'twilio', 'effects');
      for (const r of twilio.createRequests) bump(keyOf(r.form.get('Body')), 'twilio', 'requests');
      return out;
    },
    async flushEvents() {
      await pump();
    },
    async close() {
      clearInterval(timer);
      await pumping.catch(() => {});
      await new Promise<void>((r) => hook.close(() => r()));
      hook.closeAllConnections?.();
      await Promise.allSettled([stripe.close(), sendgrid.close(), twilio.close()]);
    },
  };
}
