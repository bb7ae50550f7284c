/**
 * The example's OpenTelemetry (src/telemetry.ts): a worker process started with
 * `OTEL_METRICS_EXPORTER=prometheus` serves Cyclone's metrics on `/metrics` through the official
 * Prometheus exporter, with the order it ran counted there; a worker started without any OTEL_*
 * exporter variable starts no SDK.
 */
import { createServer } from 'node:net';
import { Client } from '@cyclone/core';
import { killAllChildren, spawnWorker, waitFor } from '@cyclone/testkit';
import type { FastifyInstance } from 'fastify';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { buildApi } from '../src/api.js';
import { type Fakes, startFakes } from '../src/fakes.js';
import { checkoutWorkflow } from '../src/workflow.js';
import { createTestDb, type TestDb } from './support/db.js';

let db: TestDb;
let client: Client;
let app: FastifyInstance;
let fakes: Fakes;

beforeAll(async () => {
  db = await createTestDb();
  fakes = await startFakes();
  client = new Client({ connectionString: db.url, poolSize: 4 });
  app = buildApi({ client, workflow: checkoutWorkflow(), twilioAuthToken: 'test-token' });
  await app.ready();
});

afterEach(async () => {
  await killAllChildren();
});

afterAll(async () => {
  await killAllChildren();
  await app?.close();
  await client?.close();
  await fakes?.close();
  await db?.drop();
});

/** A port free right now on 127.0.0.1. */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}

/** The worker process of the example, with `env` added (no OTEL_* variable otherwise). */
function startWorker(env: Record<string, string>) {
  const clean = Object.fromEntries(
    Object.keys(process.env)
      .filter((k) => k.startsWith('OTEL_'))
      .map((k) => [k, '']),
  );
  return spawnWorker({
    script: new URL('../src/worker-main.ts', import.meta.url),
    env: { ...clean, ...fakes.env, DATABASE_URL: db.url, WORKER_LEASE_MS: '2000', ...env },
    label: 'worker',
    ready: /^READY (\d+) (\S+)$/,
    readyTimeoutMs: 30_000,
  });
}

describe('the checkout worker with OpenTelemetry', () => {
  it('serves Prometheus /metrics when asked, with the steps of the order it ran', async () => {
    const port = await freePort();
    const worker = await startWorker({
      OTEL_METRICS_EXPORTER: 'prometheus',
      OTEL_EXPORTER_PROMETHEUS_HOST: '127.0.0.1',
      OTEL_EXPORTER_PROMETHEUS_PORT: String(port),
    });
    // Its start-up lines go to stderr, which may trail the READY line on stdout.
    await waitFor('the exporter line', () =>
      worker.stderr.includes(`metrics: prometheus on :${port}/metrics`),
    );
    const res = await app.inject({
      method: 'POST',
      url: '/orders',
      headers: { 'idempotency-key': 'otel-1' },
      payload: {
        orderId: 'otel-1',
        sku: 'widget',
        quantity: 1,
        email: 'ada@example.com',
        phone: '+15551234567',
      },
    });
    expect(res.statusCode).toBe(202);
    const { runId } = res.json() as { runId: string };
    // Fulfilled; its follow-up timer waits on (3 days by default), so the run stays running.
    await waitFor(
      'the order to be fulfilled',
      async () =>
        (await client.getRun(runId)).steps.find((x) => x.node === 'fulfil')?.state === 'completed',
      { timeoutMs: 30_000 },
    );

    const metrics = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
    const line = (name: string, labels: string) =>
      metrics.split('\n').find((l) => l.startsWith(`${name}{`) && l.includes(labels));
    for (const node of ['reserve', 'charge', 'receipt', 'sms', 'fulfil']) {
      expect(
        line(
          'cyclone_steps_finished_total',
          `cyclone_workflow="checkout",cyclone_node="${node}",cyclone_outcome="completed"`,
        ),
        metrics,
      ).toMatch(/ 1$/);
    }
    // A small order skips the approval (its condition is false), and with it the refund.
    expect(
      line('cyclone_steps_finished_total', 'cyclone_node="approval",cyclone_outcome="skipped"'),
    ).toMatch(/ 1$/);
    expect(metrics).toMatch(/^cyclone_step_duration_count\{.*cyclone_node="charge".*\} 1$/m);
    expect(metrics).toMatch(/^cyclone_steps_ready\{.*\} \d+$/m);
    expect(metrics).toMatch(/^cyclone_idempotency_unknown_outcomes\{.*\} 0$/m);
  });

  it('starts no SDK without an OTEL_* exporter', async () => {
    const worker = await startWorker({});
    worker.proc.kill('SIGTERM');
    expect((await worker.exited).code).toBe(0);
    expect(worker.stderr).toContain('stripe: the fake at');
    expect(worker.stderr).not.toMatch(/traces:|metrics:/);
  });
});
