/**
 * A child process of connection-loss.test.ts (spawned through @cyclone/testkit's `spawnWorker`,
 * never imported by tests): `node --conditions=@cyclone/source --import tsx connection-loss-child.ts`.
 *
 * Runs one client operation that holds a checked-out connection, waits until that operation is
 * blocked on a lock this process holds on another connection, then terminates the operation's
 * backend (as a database restart, a failover or `idle_in_transaction_session_timeout` would).
 * A checked-out pg client whose connection dies emits 'error'; with no listener that is an
 * uncaught exception and the process dies. This one must not.
 *
 * Environment: DATABASE_URL (a migrated test database), SCENARIO: `cancel` (Client.cancel, the
 * operator actions' run transaction) or `migrate` (Client.migrate, under its advisory lock).
 * Stdout: `READY <pid>`, then `OUTCOME <resolved|rejected: message>`, `AFTER <what>` (the same
 * client works afterwards), `SURVIVED`; exit code 0.
 */
import { Client, newAction, newWorkflow } from '@cyclone/core';
import { announceReady, emitLine, requireEnv } from '@cyclone/testkit';
import pg from 'pg';

const url = requireEnv('DATABASE_URL');
const scenario = requireEnv('SCENARIO');
const SCHEMA = 'lossy';

const Flow = newWorkflow('connection_loss', {
  nodes: { only: { action: newAction('connection_loss', async () => null) } },
});

async function connect(): Promise<pg.Client> {
  const c = new pg.Client({ connectionString: url });
  c.on('error', () => {});
  await c.connect();
  return c;
}
/** Holds the lock the operation waits for. */
const admin = await connect();
/** Watches pg_stat_activity (outside a transaction: inside one, it is a snapshot). */
const observer = await connect();
announceReady();

/** Polls until a backend waits on a lock (the operation's); returns its pid. */
async function blockedBackend(): Promise<number> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const { rows } = await observer.query<{ pid: number }>(
      `SELECT pid FROM pg_stat_activity
       WHERE datname = current_database() AND wait_event_type = 'Lock'`,
    );
    if (rows[0]) return rows[0].pid;
    if (Date.now() > deadline) throw new Error('no blocked backend within 10 s');
    await new Promise((r) => setTimeout(r, 20));
  }
}

const outcome = (p: Promise<unknown>) =>
  p.then(
    () => 'resolved',
    (err: unknown) => `rejected: ${(err as Error).message}`,
  );

if (scenario === 'cancel') {
  const client = new Client({ connectionString: url, poolSize: 2 });
  const { runId } = await client.submit(Flow, {});
  // A concurrent transaction holds the run row (a completion, another operator).
  await admin.query('BEGIN');
  await admin.query('SELECT 1 FROM cyclone.cyclone_runs WHERE id = $1 FOR UPDATE', [runId]);
  const cancelling = outcome(client.cancel(runId));
  await observer.query('SELECT pg_terminate_backend($1)', [await blockedBackend()]);
  emitLine(`OUTCOME ${await cancelling}`);
  await admin.query('ROLLBACK');
  await client.cancel(runId);
  emitLine(`AFTER ${(await client.getRun(runId)).state}`);
  await client.close();
} else if (scenario === 'migrate') {
  const client = new Client({ connectionString: url, poolSize: 2, schema: SCHEMA });
  // Another process is migrating the same schema: the advisory lock of migrate().
  await admin.query('BEGIN');
  await admin.query('SELECT pg_advisory_xact_lock(hashtextextended($1, 0))', [
    `cyclone:migrate:${SCHEMA}`,
  ]);
  const migrating = outcome(client.migrate());
  await observer.query('SELECT pg_terminate_backend($1)', [await blockedBackend()]);
  emitLine(`OUTCOME ${await migrating}`);
  await admin.query('ROLLBACK');
  emitLine(`AFTER migrated ${(await client.migrate()).length}`);
  await client.close();
} else {
  throw new Error(`unknown SCENARIO ${scenario}`);
}

// Let any late 'error' event of the dead connection fire before declaring survival.
await new Promise((r) => setTimeout(r, 50));
await admin.end();
await observer.end();
emitLine('SURVIVED');
process.exit(0);
