/**
 * A worker cut off between its completion statement and its COMMIT, on a handler's
 * `completionTx`: the step's row is locked by a session that sits idle in transaction while its
 * TCP peer (here a black-holing proxy) stays alive. The server must end that session within the
 * lease, so that the recovery sweep, which skips locked rows, can take the step over: the step
 * runs again elsewhere and its business row is written exactly once. Run directly and through
 * PgBouncer (vitest.pgbouncer.config.ts), where the limit must come from the transaction itself:
 * a session setting cannot follow a transaction-pooled connection.
 */
import { engineClientOptions, engineUrl } from '@cyclone/testkit';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { Client, newAction, newWorkflow, Worker } from '../src/index.js';
import { BlackholeProxy } from './support/blackhole-proxy.js';
import { createTestDb, type TestDb } from './support/db.js';

let db: TestDb;
let proxy: BlackholeProxy;
const cleanup: (() => Promise<unknown>)[] = [];

beforeAll(async () => {
  db = await createTestDb();
  const u = new URL(engineUrl(db.url));
  proxy = await BlackholeProxy.start({ host: u.hostname, port: Number(u.port || 5432) });
});

afterAll(async () => {
  // The proxy first: its silent sockets are destroyed, so the victim's pools end at once.
  await proxy?.close();
  for (const f of cleanup.reverse()) await f().catch(() => {});
  await db?.drop();
});

it('a partition between the completion and its COMMIT never leaves the step stuck', async () => {
  const LEASE_MS = 1_000;
  const setup = new Client({ connectionString: db.url, poolSize: 2 });
  cleanup.push(() => setup.close());
  await setup.pool.query(
    'CREATE TABLE gap_rows (run_id uuid, attempt int, worker text, PRIMARY KEY (run_id))',
  );
  const Write = newAction('gap_write', async (ctx) => {
    const tx = await ctx.completionTx();
    await tx.query('INSERT INTO gap_rows (run_id, attempt, worker) VALUES ($1, $2, $3)', [
      ctx.runId,
      ctx.attempt,
      ctx.attempt === 1 ? 'victim' : 'rescuer',
    ]);
    // The victim's COMMIT never reaches the server: the proxy goes silent just before it.
    if (ctx.attempt === 1) proxy.cutAtNextCommit();
    return { attempt: ctx.attempt };
  });
  const Flow = newWorkflow('gap_flow', { nodes: { only: { action: Write } } });

  const victimClient = new Client({
    connectionString: proxy.urlThrough(engineUrl(db.url)),
    poolSize: 2,
    ...engineClientOptions,
  });
  const victim = new Worker({
    client: victimClient,
    workflows: [Flow],
    concurrency: 1,
    leaseMs: LEASE_MS,
    listen: false,
    pollIntervalMs: 50,
  });
  cleanup.push(() => victimClient.close());
  cleanup.push(() => victim.stop({ graceMs: 200 }));
  await victim.start();
  const { runId } = await setup.submit(Flow, {});
  await proxy.wasCut;
  const cutAt = Date.now();

  // Another host takes over once the lease expired and the server ended the idle session.
  const rescuer = new Worker({
    client: setup,
    workflows: [Flow],
    leaseMs: LEASE_MS,
    sweepIntervalMs: 200,
    pollIntervalMs: 50,
  });
  cleanup.push(() => rescuer.stop({ graceMs: 1_000 }));
  await rescuer.start();
  const run = await setup.waitForRun(runId, { timeoutMs: 20_000, pollMs: 50 });
  const tookOverMs = Date.now() - cutAt;

  expect(run.state).toBe('completed');
  expect(run.steps[0]?.attempt).toBe(2);
  expect(run.steps[0]?.errors.map((e) => e.kind)).toEqual(['lease_expired']);
  const { rows } = await setup.pool.query('SELECT attempt, worker FROM gap_rows');
  expect(rows).toEqual([{ attempt: 2, worker: 'rescuer' }]);
  // No session of the cut-off worker stays idle in a transaction on the server: each of its
  // transactions ends within the lease of its last statement (no COMMIT ever reached them).
  await expect
    .poll(
      async () =>
        (
          await setup.pool.query(
            "SELECT count(*)::int AS n FROM pg_stat_activity WHERE state = 'idle in transaction' AND datname = current_database()",
          )
        ).rows[0].n,
      { timeout: LEASE_MS + 2_000, interval: 100 },
    )
    .toBe(0);
  console.log(`partition at the COMMIT: step taken over ${tookOverMs} ms after the cut`);
});
