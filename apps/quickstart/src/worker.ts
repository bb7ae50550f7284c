/**
 * One worker process of the demo. `main.ts` starts several with DATABASE_URL set, reads the
 * `READY <workerId>` line, and may SIGKILL one. SIGTERM (or the parent going away, which closes
 * stdin) stops it gracefully.
 */
import { Client, consoleLogger, Worker } from '@cyclone/core';
import { Order, setCallLog } from './workflow.js';

const connectionString = process.env.DATABASE_URL;
if (!connectionString) {
  process.stderr.write('quickstart worker: DATABASE_URL is not set\n');
  process.exit(2);
}

const client = new Client({ connectionString, logger: consoleLogger('error') });
setCallLog(client);
const worker = new Worker({
  client,
  workflows: [Order],
  concurrency: 5,
  // Short leases so the demo recovers a killed worker's steps in about two seconds.
  leaseMs: 2_000,
  sweepIntervalMs: 500,
  pollIntervalMs: 250,
});
await worker.start();
process.stdout.write(`READY ${worker.workerId}\n`);

let stopping = false;
async function shutdown(): Promise<void> {
  if (stopping) return;
  stopping = true;
  await worker.stop({ graceMs: 5_000 });
  await client.close();
  process.exit(0);
}
process.on('SIGTERM', () => void shutdown());
process.on('SIGINT', () => void shutdown());
process.stdin.on('end', () => void shutdown());
process.stdin.resume();
