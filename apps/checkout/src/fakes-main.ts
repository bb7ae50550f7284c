/**
 * The provider fakes on their own: `pnpm --filter @cyclone/example-checkout fakes`, for running
 * the API and workers by hand without provider accounts. Writes where they listen to
 * `.cyclone/checkout-fakes.json`, where the API and the workers find them; delivers SendGrid's
 * events to the API's webhook (WEBHOOK_URL, default http://127.0.0.1:3000/hooks/sendgrid); prints
 * what they counted every 10 s and on Ctrl-C.
 */
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { cycloneDir } from './db.js';
import { pumpSendgridEvents, startFakes } from './fakes.js';
import { fakesFile } from './providers.js';

const fakes = await startFakes();
mkdirSync(cycloneDir(), { recursive: true });
writeFileSync(fakesFile(), `${JSON.stringify(fakes.urls, null, 2)}\n`);
const webhook = process.env.WEBHOOK_URL ?? 'http://127.0.0.1:3000/hooks/sendgrid';
const stopPump = pumpSendgridEvents(fakes.sendgrid, webhook, 1_000);

const say = (line: string) => process.stdout.write(`${line}\n`);
say(`stripe   ${fakes.urls.stripe}`);
say(`sendgrid ${fakes.urls.sendgrid} (events to ${webhook})`);
say(`twilio   ${fakes.urls.twilio}`);
say(`shipping ${fakes.shipping.url}`);
say(`written to ${fakesFile()}; Ctrl-C to stop`);

let last = '';
const counts = () =>
  `charges ${fakes.stripe.count('charge')}, e-mails ${fakes.sendgrid.effects}, SMS ${fakes.twilio.effects}, shipments ${fakes.shipping.count()}`;
const timer = setInterval(() => {
  const now = counts();
  if (now !== last) say(now);
  last = now;
}, 10_000);

async function shutdown(): Promise<void> {
  clearInterval(timer);
  await stopPump();
  say(counts());
  rmSync(fakesFile(), { force: true });
  await fakes.close();
  process.exit(0);
}
process.on('SIGINT', () => void shutdown());
process.on('SIGTERM', () => void shutdown());
