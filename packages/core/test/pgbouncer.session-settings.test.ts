/**
 * The worker's session settings (planner hints and an idle-in-transaction bound on its control
 * connections, set when a connection opens) and a transaction-pooling PgBouncer: a session `SET`
 * sent through PgBouncer lands on whichever server connection runs it and stays there for the
 * next client, so the worker sends them on a session of the server's own only. PgBouncer here
 * has one server connection, so anything left on it shows to the next client. Prepared
 * statements are on, as PgBouncer 1.21+ with `max_prepared_statements` allows; no engine
 * statement runs (this PgBouncer, 1.18, cannot keep them).
 */
import { type PgBouncer, startPgBouncer } from '@cyclone/testkit';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, newAction, newWorkflow, Worker } from '../src/index.js';
import { createTestDb, type TestDb } from './support/db.js';

const Noop = newWorkflow('session_settings_noop', {
  nodes: { only: { action: newAction('session_settings_noop', async () => ({})) } },
});

const SETTINGS = `SELECT current_setting('enable_bitmapscan') AS bitmapscan,
  current_setting('enable_seqscan') AS seqscan, current_setting('jit') AS jit,
  current_setting('plan_cache_mode') AS plan_cache_mode,
  current_setting('idle_in_transaction_session_timeout') AS idle_limit`;

let db: TestDb;
let bouncer: PgBouncer;

beforeAll(async () => {
  db = await createTestDb();
  bouncer = await startPgBouncer({ poolSize: 1 });
});

afterAll(async () => {
  await bouncer?.stop();
  await db?.drop();
});

/** A worker (never started) whose control pool opens one connection; returns what it shows. */
async function controlConnection(url: string) {
  const client = new Client({ connectionString: url, poolSize: 1 });
  const worker = new Worker({ client, workflows: [Noop], leaseMs: 30_000, listen: false });
  const control = (worker as unknown as { controlPool: pg.Pool }).controlPool;
  try {
    return (await control.query(SETTINGS)).rows[0];
  } finally {
    await worker.stop();
    await client.close();
  }
}

describe('session settings of the worker control connections', () => {
  it('are in effect on a direct session', async () => {
    expect(await controlConnection(db.url)).toEqual({
      bitmapscan: 'off',
      seqscan: 'off',
      jit: 'off',
      plan_cache_mode: 'force_generic_plan',
      idle_limit: '30s',
    });
  });

  it('are never sent through PgBouncer, where they would stay on the shared server connection', async () => {
    // The server's own jit (on where PostgreSQL was built with LLVM, else off).
    const direct = new pg.Client({ connectionString: db.url });
    await direct.connect();
    const server = (await direct.query<{ jit: string }>('SHOW jit')).rows[0] as { jit: string };
    await direct.end();
    await controlConnection(bouncer.url(db.url));
    // The next client of PgBouncer's one server connection sees the server's defaults.
    const other = new pg.Client({ connectionString: bouncer.url(db.url) });
    await other.connect();
    try {
      const shown = (await other.query(SETTINGS)).rows[0];
      expect(shown).toEqual({
        bitmapscan: 'on',
        seqscan: 'on',
        jit: server.jit,
        plan_cache_mode: 'auto',
        idle_limit: '0',
      });
    } finally {
      await other.end();
    }
  });
});
