/**
 * The ledger outside `once`: its migration, retention (`reapLedger`), operator resolution
 * (`resolveKey`) and the ON CONFLICT helpers (`insertOnce`, `upsertOnce`).
 */
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client, type Context, newAction, newWorkflow, type Worker } from '@cyclone/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  getLedgerEntry,
  IdempotencyKeyError,
  IdempotencyUsageError,
  insertOnce,
  migrateIdempotency,
  reapLedger,
  resolveKey,
  upsertOnce,
} from '../src/index.js';
import { createTestDb, type TestDb } from './support/db.js';
import { startWorker } from './support/harness.js';

let db: TestDb;
let client: Client;

beforeAll(async () => {
  db = await createTestDb();
  client = new Client({ connectionString: db.url, poolSize: 4 });
});

afterAll(async () => {
  await client.close();
  await db.drop();
});

const Noop = newWorkflow('idem_noop', {
  nodes: { step: { action: newAction('idem_noop', async () => null) } },
});

/** A run with one ledger row per given phase, its step and run put in the given states. */
async function runWithRow(
  runState: 'running' | 'completed' | 'failed' | 'cancelled',
  options: { finishedAgoMs?: number; stepState?: string; phase?: string } = {},
): Promise<{ runId: string; key: string }> {
  const { runId } = await client.submit(Noop, null);
  const key = `${runId}:step`;
  await db.pool.query(
    `INSERT INTO cyclone.cyclone_idempotency
       (run_id, key, node, request_hash, phase, owner_attempt, call_started_at, calls)
     VALUES ($1, $2, 'step', 'h', $3, 1, now(), 1)`,
    [runId, key, options.phase ?? 'succeeded'],
  );
  await db.pool.query(
    `UPDATE cyclone.cyclone_steps SET state = $2, attempt = 1 WHERE run_id = $1`,
    [runId, options.stepState ?? (runState === 'running' ? 'available' : 'completed')],
  );
  await db.pool.query(
    `UPDATE cyclone.cyclone_runs SET state = $2,
       completed_at = CASE WHEN $2 = 'running' THEN NULL
                           ELSE now() - make_interval(secs => $3::double precision / 1000) END
     WHERE id = $1`,
    [runId, runState, options.finishedAgoMs ?? 0],
  );
  return { runId, key };
}

describe('migrations', () => {
  it('the embedded migrations match migrations/*.sql', async () => {
    const here = dirname(fileURLToPath(import.meta.url));
    // @ts-expect-error: a plain .mjs script without types
    const { render } = await import('../../../scripts/embed-migrations.mjs');
    const generated = readFileSync(join(here, '..', 'src', 'migrations.generated.ts'), 'utf8');
    expect(generated).toBe(render(join(here, '..', 'migrations')));
  });

  it('migrateIdempotency applies core and the ledger to a new schema once', async () => {
    const other = new Client({ connectionString: db.url, poolSize: 2, schema: 'idem_other' });
    try {
      const [first, second] = await Promise.all([
        migrateIdempotency(other),
        migrateIdempotency(other),
      ]);
      expect([...(first ?? []), ...(second ?? [])]).toEqual([
        '000001_ledger',
        '000002_unknown_index',
      ]);
      expect(await migrateIdempotency(other)).toEqual([]);
      const { rows } = await db.pool.query(
        `SELECT component, name FROM idem_other.cyclone_migrations ORDER BY component, name`,
      );
      expect(rows.map((r) => r.component)).toContain('core');
      expect(rows).toContainEqual({ component: 'idempotency', name: '000001_ledger' });
    } finally {
      await other.close();
    }
  });
});

describe('reapLedger', () => {
  it('deletes rows of completed and cancelled runs past the age, never of running or failed runs', async () => {
    const day = 86_400_000;
    const oldCompleted = await runWithRow('completed', { finishedAgoMs: 3 * day });
    const oldCancelled = await runWithRow('cancelled', { finishedAgoMs: 3 * day });
    const oldFailed = await runWithRow('failed', {
      finishedAgoMs: 3 * day,
      stepState: 'discarded',
    });
    const running = await runWithRow('running');
    const recent = await runWithRow('completed', { finishedAgoMs: 1_000 });

    expect(await reapLedger(client, { olderThanMs: 2 * day, states: ['completed'] })).toBe(1);
    expect(await getLedgerEntry(client, oldCompleted.key)).toBeUndefined();
    expect(await getLedgerEntry(client, oldCancelled.key)).toBeDefined();

    expect(await reapLedger(client, { olderThanMs: 2 * day, batchSize: 1 })).toBe(1);
    expect(await getLedgerEntry(client, oldCancelled.key)).toBeUndefined();
    for (const kept of [oldFailed, running, recent]) {
      expect(await getLedgerEntry(client, kept.key)).toBeDefined();
    }
    // Rows go with their run (foreign key).
    await db.pool.query('DELETE FROM cyclone.cyclone_runs WHERE id = $1', [recent.runId]);
    expect(await getLedgerEntry(client, recent.key)).toBeUndefined();
  });

  it('refuses bad options', async () => {
    await expect(reapLedger(client, { olderThanMs: -1 })).rejects.toBeInstanceOf(
      IdempotencyUsageError,
    );
    await expect(
      reapLedger(client, { olderThanMs: 1, states: ['failed' as 'completed'] }),
    ).rejects.toThrow(/states must be/);
  });
});

describe('resolveKey', () => {
  it('marks an unknown outcome succeeded or not sent; refuses a running step and a success', async () => {
    const a = await runWithRow('failed', { stepState: 'discarded', phase: 'unknown' });
    const done = await resolveKey(client, a.key, { outcome: 'succeeded', result: { id: 'x' } });
    expect(done).toMatchObject({ phase: 'succeeded', result: { id: 'x' }, generation: 0 });
    await expect(resolveKey(client, a.key, { outcome: 'not_sent' })).rejects.toThrow(
      /already succeeded/,
    );

    const b = await runWithRow('failed', { stepState: 'discarded', phase: 'unknown' });
    expect(await resolveKey(client, b.key, { outcome: 'not_sent' })).toMatchObject({
      phase: 'started',
      callStartedAt: null,
      generation: 0, // an unknown outcome never changes the key
    });

    const c = await runWithRow('failed', { stepState: 'discarded', phase: 'failed' });
    expect(await resolveKey(client, c.key, { outcome: 'not_sent' })).toMatchObject({
      phase: 'started',
      generation: 1, // after a definitive failure: a fresh key
    });

    const d = await runWithRow('running', { stepState: 'running', phase: 'started' });
    await expect(resolveKey(client, d.key, { outcome: 'not_sent' })).rejects.toThrow(
      /resolve a key only while its step is not running/,
    );
    await expect(resolveKey(client, `${d.runId}:nope`, { outcome: 'not_sent' })).rejects.toThrow(
      /no ledger row/,
    );
  });
});

describe('insertOnce and upsertOnce', () => {
  let worker: Worker | undefined;
  const write = newAction(
    'idem_write',
    async (ctx: Context) => {
      const mail = await insertOnce<{ id: string; to_addr: string; attempt: number }>(ctx, {
        table: 'public.outbox',
        values: { to_addr: 'a@x', attempt: ctx.attempt },
      });
      const line = await insertOnce(ctx, {
        table: 'lines',
        scope: 'line-1',
        values: { attempt: ctx.attempt },
      });
      const status = await upsertOnce<{ attempt: number }>(ctx, {
        table: 'status',
        values: { attempt: ctx.attempt },
      });
      if (ctx.attempt === 1) throw new Error('retry after the writes');
      return { mail, line, status };
    },
    { maxAttempts: 3, backoff: () => 20 },
  );
  const WriteFlow = newWorkflow('idem_write', { nodes: { w: { action: write } } });

  it('write once per step (or scope) across attempts; upsert keeps the last attempt', async () => {
    await db.pool.query(`
      CREATE TABLE outbox (id bigserial PRIMARY KEY, run_id uuid NOT NULL, node text NOT NULL,
        to_addr text NOT NULL, attempt int NOT NULL, UNIQUE (run_id, node));
      CREATE TABLE lines (run_id uuid NOT NULL, node text NOT NULL, scope text NOT NULL,
        attempt int NOT NULL, UNIQUE (run_id, node, scope));
      CREATE TABLE status (run_id uuid NOT NULL, node text NOT NULL, attempt int NOT NULL,
        PRIMARY KEY (run_id, node));`);
    worker = await startWorker(client, [WriteFlow]);
    try {
      const { runId } = await client.submit(WriteFlow, null);
      const run = await client.waitForRun(runId, { timeoutMs: 20_000 });
      expect(run.state).toBe('completed');
      expect(run.steps[0]?.output).toMatchObject({
        mail: { inserted: false, row: { to_addr: 'a@x', attempt: 1, node: 'w' } },
        line: { inserted: false, row: { scope: 'line-1', attempt: 1 } },
        status: { attempt: 2 },
      });
      const n = await db.pool.query(
        `SELECT (SELECT count(*) FROM outbox)::int AS o, (SELECT count(*) FROM lines)::int AS l`,
      );
      expect(n.rows[0]).toEqual({ o: 1, l: 1 });
    } finally {
      await worker.stop({ graceMs: 1_000 });
    }
  });

  it('refuse bad names and key columns', async () => {
    const ctx = { runId: '00000000-0000-0000-0000-000000000000', node: 'n', client };
    await expect(insertOnce(ctx, { table: 'x; DROP TABLE y', values: {} })).rejects.toBeInstanceOf(
      IdempotencyUsageError,
    );
    await expect(insertOnce(ctx, { table: 'outbox', values: { node: 'x' } })).rejects.toThrow(
      /must not set the key column node/,
    );
    await expect(insertOnce(ctx, { table: 'a.b.c', values: {} })).rejects.toThrow(/schema.name/);
    await expect(upsertOnce(ctx, { table: 'status', values: {} })).rejects.toThrow(
      /at least one column/,
    );
    await expect(insertOnce(ctx, { table: 'lines', scope: '', values: {} })).rejects.toBeInstanceOf(
      IdempotencyKeyError,
    );
  });
});
