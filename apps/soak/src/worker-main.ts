/**
 * A soak worker process: a `Worker` running both soak workflows against the dedicated database,
 * with real Stripe, SendGrid and Twilio SDK clients pointed at the orchestrator's fakes. It
 * reports each handler start over IPC, blocks its own event loop when asked (a worker alive
 * but stalled past its lease), and stops gracefully on `stop` or SIGTERM. Its logs (warnings
 * and errors, one JSON line each) go to stderr, which the orchestrator keeps in a file.
 *
 * Anything that escapes (an unhandled rejection, an uncaught exception) is logged with its
 * stack and ends the process with exit code 70: the orchestrator counts such exits as
 * unexpected (an engine bug), restarts the worker and fails the soak.
 */
import { Client, consoleLogger, Worker } from '@cyclone/core';
import { createMailService } from '@cyclone/sendgrid';
import { LoopbackRequestClient } from '@cyclone/twilio/testing';
import Stripe from 'stripe';
import twilio from 'twilio';
import type { OrchestratorMessage, WorkerEnv, WorkerMessage } from './protocol.js';
import { installWorkerDeps, WORKFLOWS } from './workload.js';

const env = process.env as unknown as WorkerEnv;
const num = (name: keyof WorkerEnv) => {
  const v = Number(env[name]);
  if (!Number.isFinite(v)) throw new Error(`${name} must be a number, got ${env[name]}`);
  return v;
};

function send(m: WorkerMessage): void {
  if (process.connected) process.send?.(m, undefined, {}, () => {});
}

const log = consoleLogger('warn', { worker: Number(env.SOAK_WORKER_INDEX) });

function die(what: string, err: unknown): void {
  const e = err as Error | undefined;
  process.stderr.write(
    `${JSON.stringify({ level: 'fatal', time: new Date().toISOString(), msg: what, err: String(e?.stack ?? err) })}\n`,
  );
  process.exit(70);
}
process.on('unhandledRejection', (err) => die('unhandled rejection', err));
process.on('uncaughtException', (err) => die('uncaught exception', err));

const timeoutMs = num('SOAK_PROVIDER_TIMEOUT_MS');
const stripeUrl = new URL(env.SOAK_STRIPE_URL);
const stripe = new Stripe(env.SOAK_STRIPE_KEY, {
  host: stripeUrl.hostname,
  port: Number(stripeUrl.port),
  protocol: 'http',
  telemetry: false,
  // No SDK retries: every fault reaches the adapter and its ledger.
  maxNetworkRetries: 0,
  timeout: timeoutMs,
});
const mail = createMailService({
  apiKey: env.SOAK_SENDGRID_KEY,
  baseUrl: `${env.SOAK_SENDGRID_URL.replace(/\/$/, '')}/`,
  timeoutMs,
});
const sms = twilio(env.SOAK_TWILIO_SID, env.SOAK_TWILIO_TOKEN, {
  httpClient: new LoopbackRequestClient(env.SOAK_TWILIO_URL, {
    timeout: timeoutMs,
    autoRetry: false,
  }),
});

// Through PgBouncer (transaction mode): no named prepared statements, no LISTEN (it polls).
const viaPgBouncer = env.SOAK_PGBOUNCER === '1';
const client = new Client({
  connectionString: env.SOAK_DATABASE_URL,
  poolSize: 3,
  logger: log,
  ...(viaPgBouncer ? { preparedStatements: false } : {}),
});
const worker = new Worker({
  client,
  workflows: WORKFLOWS,
  concurrency: num('SOAK_CONCURRENCY'),
  leaseMs: num('SOAK_LEASE_MS'),
  sweepIntervalMs: num('SOAK_SWEEP_MS'),
  pollIntervalMs: num('SOAK_POLL_MS'),
  logger: log,
  ...(viaPgBouncer ? { listen: false } : {}),
});

installWorkerDeps({
  stripe,
  mail,
  twilio: sms,
  quietPeriodMs: num('SOAK_QUIET_PERIOD_MS'),
  onStart: (ctx) =>
    send({ t: 'start', runId: ctx.runId, node: ctx.node, attempt: ctx.attempt, at: Date.now() }),
  workerId: () => worker.workerId,
});

let stopping = false;
async function stop(): Promise<void> {
  if (stopping) return;
  stopping = true;
  await worker.stop({ graceMs: 5_000 });
  await client.close();
  process.exit(0);
}

process.on('message', (m: OrchestratorMessage) => {
  if (m.t === 'block') {
    const from = Date.now();
    const until = from + m.ms;
    // A busy loop on purpose: the whole event loop (heartbeats included) stands still.
    while (Date.now() < until) {
      /* stalled */
    }
    send({ t: 'blocked', from, to: Date.now() });
  } else if (m.t === 'stop') {
    void stop();
  }
});
process.on('SIGTERM', () => void stop());
// The orchestrator went away: nobody will stop or count us.
process.on('disconnect', () => void stop());

await worker.start();
send({ t: 'ready', workerId: worker.workerId, pid: process.pid });
