/**
 * A worker host of the partition test (partition.netns.test.ts), run inside a network namespace
 * (`ip netns exec <ns> node … partition-worker.ts`), never imported by tests: the workflows of
 * partition-flows.ts (the probe in the victim only) on a Worker with the engine's default lease
 * and dead-connection settings.
 *
 * Environment: DATABASE_URL, PROVIDER_URL, HOLD_FILE, PARTITION_VICTIM (1 for the victim).
 * Stdout: `READY <pid> <workerId>`; `HOLD <runId> <attempt>` when a handler holds;
 * `LATE <runId> <what>` for the victim's late calls; `CONN <epoch ms> <log line>` for each log
 * line about a failed connection or statement; `STATS <json>` whenever the worker's counters move.
 */
import { Client, stderrLogger, Worker } from '@cyclone/core';
import { announceReady, emitLine, requireEnv } from '@cyclone/testkit';
import { configurePartition, PayFlow, ProbeFlow } from './partition-flows.js';

const victim = process.env.PARTITION_VICTIM === '1';
configurePartition({
  providerUrl: requireEnv('PROVIDER_URL'),
  holdFile: requireEnv('HOLD_FILE'),
  victim,
  emit: emitLine,
});

const CONNECTION_TROUBLE =
  /heartbeat failed|LISTEN connection lost|LISTEN failed|idle connection lost|connection lost|claim failed|could not read the next due step|could not record|background task failed|database connection failed/;

const logger = stderrLogger({
  level: 'warn',
  write: (line) => {
    process.stderr.write(line);
    if (CONNECTION_TROUBLE.test(line)) emitLine(`CONN ${Date.now()} ${line.trim()}`);
  },
});

const client = new Client({ connectionString: requireEnv('DATABASE_URL'), logger });
const worker = new Worker({
  client,
  workflows: victim ? [PayFlow, ProbeFlow] : [PayFlow],
  concurrency: 8,
});
await worker.start();
announceReady(worker.workerId);

let last = '';
setInterval(() => {
  const now = JSON.stringify(worker.stats);
  if (now !== last) emitLine(`STATS ${now}`);
  last = now;
}, 100);

process.once('SIGTERM', () => {
  void worker
    .stop({ graceMs: 1_000 })
    .then(() => client.close())
    .finally(() => process.exit(0));
});
