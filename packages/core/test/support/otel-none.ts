/**
 * A process with no OpenTelemetry SDK, for observability.test.ts (spawned with
 * @cyclone/testkit's `spawnWorker`, never imported by tests): submits a run, runs it on a
 * worker, then reports which OpenTelemetry modules it loaded (`LOADED <json>`: the paths in
 * Node's module cache, where the API's and any SDK's CommonJS builds land) and the run's stored
 * trace context (`TRACEPARENT <json>`), then exits.
 *
 * Environment: DATABASE_URL (the test file's database).
 */
import { createRequire } from 'node:module';
import { announceReady, emitLine, requireEnv } from '@cyclone/testkit';
import { Client, newAction, newWorkflow, silentLogger, Worker } from '../../src/index.js';

const Flow = newWorkflow<{ n: number }>('otel_none', {
  nodes: { a: { action: newAction('otel_none_a', async (_ctx, input: { n: number }) => input.n) } },
});

const client = new Client({
  connectionString: requireEnv('DATABASE_URL'),
  poolSize: 2,
  logger: silentLogger,
});
const worker = new Worker({ client, workflows: [Flow], concurrency: 2, pollIntervalMs: 50 });
await worker.start();
announceReady(worker.workerId);
const { runId } = await client.submit(Flow, { n: 1 });
const { runIds } = await client.submitMany(Flow, [{ n: 2 }, { n: 3 }]);
for (const id of [runId, ...runIds]) await client.waitForRun(id, { timeoutMs: 20_000 });
const { rows } = await client.pool.query(
  'SELECT traceparent FROM cyclone.cyclone_runs WHERE id = ANY($1::uuid[])',
  [[runId, ...runIds]],
);
await worker.stop();
await client.close();

const loaded = Object.keys(createRequire(import.meta.url).cache).filter((p) =>
  p.includes('@opentelemetry'),
);
emitLine(`LOADED ${JSON.stringify(loaded)}`);
emitLine(`TRACEPARENT ${JSON.stringify(rows.map((r) => r.traceparent))}`);
process.exit(0);
