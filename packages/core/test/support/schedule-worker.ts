/**
 * A worker process carrying a per-second schedule, for scheduler.processes.test.ts (spawned with
 * @cyclone/testkit's `spawnWorker`, never imported by tests):
 * `node --conditions=@cyclone/source --import tsx schedule-worker.ts`.
 *
 * Environment: DATABASE_URL (the test file's database).
 * Stdout protocol (one line each): `READY <pid> <workerId>` once the worker runs, `STOPPED` after
 * a SIGTERM-initiated graceful stop.
 */
import { Client, consoleLogger, newAction, newSchedule, newWorkflow, Worker } from '@cyclone/core';
import { announceReady, emitLine, requireEnv } from '@cyclone/testkit';

type TickInput = { at: string };

const Tick = newWorkflow<TickInput>('proc_tick', {
  nodes: { a: { action: newAction('proc_noop', (_ctx, input: TickInput) => input) } },
});

/** Every second; a worker that wakes late still fires every second it missed (up to 10). */
const PerSecond = newSchedule('per-second', {
  cron: '* * * * * *',
  workflow: Tick,
  input: (fireAt) => ({ at: fireAt.toISOString() }),
  catchUp: { max: 10 },
});

const client = new Client({ connectionString: requireEnv('DATABASE_URL'), poolSize: 2 });
const worker = new Worker({
  client,
  workflows: [Tick],
  schedules: [PerSecond],
  concurrency: 2,
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
