/**
 * The API process: `pnpm --filter @cyclone/example-checkout api`.
 *
 * Database: DATABASE_URL, else the embedded PostgreSQL under `.cyclone/` (started here, or
 * reused). Migrates, then listens on HOST:PORT (default 127.0.0.1:3000; PORT=0 picks a free
 * port) and prints `LISTENING <url>` on stdout. SIGTERM or SIGINT stops it.
 *
 * PUBLIC_URL is the origin the providers' webhooks reach (Twilio signs it); default: the
 * request's Host. SENDGRID_WEBHOOK_VERIFICATION_KEY checks SendGrid's event signatures.
 * OpenTelemetry: see telemetry.ts (off unless an OTEL_* exporter is configured).
 */
// First: the OpenTelemetry SDK, when configured, must be registered before anything else loads.
import './telemetry.js';
import { Client, consoleLogger } from '@cyclone/core';
import { buildApi } from './api.js';
import { resolveDatabase } from './db.js';
import { sendgridVerificationKey, twilioAuthToken } from './providers.js';
import { migrateCheckout } from './schema.js';
import { telemetry } from './telemetry.js';

const db = await resolveDatabase();
const client = new Client({
  connectionString: db.connectionString,
  poolSize: Number(process.env.API_POOL_SIZE ?? 10),
  logger: consoleLogger('warn'),
});
await migrateCheckout(client);
const app = buildApi({
  client,
  twilioAuthToken: twilioAuthToken(),
  sendgridVerificationKey: sendgridVerificationKey(),
  publicUrl: process.env.PUBLIC_URL || undefined,
  logger: process.env.API_LOG === '1',
});
const address = await app.listen({
  host: process.env.HOST ?? '127.0.0.1',
  port: Number(process.env.PORT ?? 3000),
});
process.stdout.write(`LISTENING ${address}\n`);
for (const line of telemetry?.describe ?? []) process.stderr.write(`api: ${line}\n`);
if (process.stdout.isTTY) {
  process.stdout.write(
    `try: curl -si -X POST ${address}/orders -H 'content-type: application/json' -H 'idempotency-key: k-1' -d '{"orderId":"o-1","sku":"widget","quantity":1,"email":"ada@example.com","phone":"+15551234567"}'\n`,
  );
}

let stopping = false;
async function shutdown(): Promise<void> {
  if (stopping) return;
  stopping = true;
  // In-flight requests get a second to finish; then the connections still open are closed, or
  // close() would wait for ever on a client that gave up mid-request but keeps its socket.
  const force = setTimeout(() => app.server.closeAllConnections(), 1_000);
  await app.close();
  clearTimeout(force);
  await client.close();
  await telemetry?.shutdown();
  await db.stop();
  process.exit(0);
}
process.on('SIGTERM', () => void shutdown());
process.on('SIGINT', () => void shutdown());
if (process.env.EXIT_WITH_PARENT === '1') {
  // Started by the demo: stop when it goes away (it holds our stdin).
  process.stdin.on('end', () => void shutdown());
  process.stdin.resume();
}
