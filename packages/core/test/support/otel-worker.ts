/**
 * A worker process with tracing, for observability.test.ts (spawned with @cyclone/testkit's
 * `spawnWorker`, never imported by tests): `node --conditions=@cyclone/source --import tsx
 * otel-worker.ts`. Its spans go to stdout as they end, one `SPAN <json>` line each.
 *
 * Environment: DATABASE_URL (the test file's database), OTEL_VICTIM=1 to hang `a`'s first
 * attempt (otel-workflows.ts).
 * Stdout protocol: `READY <pid> <workerId>`, `HANG <runId>`, `SPAN <json>`, `STOPPED` after a
 * SIGTERM-initiated graceful stop.
 */
import { announceReady, emitLine, requireEnv } from '@cyclone/testkit';
import { Client, consoleLogger, Worker } from '../../src/index.js';
import { registerTracing } from './otel.js';
import { configureTraceFlow, TraceFlow } from './otel-workflows.js';

// Before the client and the worker: they look for a tracer provider once.
registerTracing((span) => emitLine(`SPAN ${JSON.stringify(span)}`));
configureTraceFlow({ victim: process.env.OTEL_VICTIM === '1' });

const client = new Client({ connectionString: requireEnv('DATABASE_URL'), poolSize: 2 });
const worker = new Worker({
  client,
  workflows: [TraceFlow],
  concurrency: 2,
  leaseMs: 1_000,
  sweepIntervalMs: 250,
  pollIntervalMs: 100,
  logger: consoleLogger('warn', { pid: process.pid }),
});

let stopping = false;
process.on('SIGTERM', () => {
  if (stopping) return;
  stopping = true;
  void (async () => {
    await worker.stop({ graceMs: 2_000 });
    await client.close();
    emitLine('STOPPED');
    process.exit(0);
  })();
});

await worker.start();
announceReady(worker.workerId);
