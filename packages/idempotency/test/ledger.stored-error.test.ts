/**
 * What the ledger stores of a failed call (`cyclone_idempotency.error`):
 * - provider secrets never reach it: a call that fails with an error quoting credentials (an SDK
 *   putting its request headers in the message) is recorded with the secret shapes redacted
 *   (core's `redactSecrets`), and so is the step's recorded error;
 * - a message cut at its 2,000-character limit inside a surrogate pair.
 */
import { Client, newAction, newWorkflow, type Worker } from '@cyclone/core';
import { REDACTED } from '@cyclone/core/internal';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { getLedgerEntry, OutcomeError, once } from '../src/index.js';
import { createTestDb, type TestDb } from './support/db.js';
import { startWorker } from './support/harness.js';

const STRIPE_KEY = 'sk_live_4eC39HqLyjWDarjtT1zdp7dc';
const SENDGRID_KEY = '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';
const BASIC = Buffer.from(
  'AC0123456789abcdef0123456789abcdef:f3c2a1b0e9d8c7b6a5f4e3d2c1b0a9f8',
).toString('base64');

let db: TestDb;
let client: Client;
let worker: Worker;

const call = newAction(
  'idem_leaky_call',
  async (ctx) =>
    once(ctx, { request: { amount: 1 }, provider: 'fake' }, async () => {
      throw new OutcomeError(
        { kind: 'definitive', status: 401, reason: `bad key ${STRIPE_KEY}` },
        `401 Unauthorized: Authorization: Basic ${BASIC}; api_key=${SENDGRID_KEY}`,
      );
    }),
  { maxAttempts: 3, backoff: () => 10 },
);
const Leaky = newWorkflow('idem_leaky', { nodes: { call: { action: call } } });

// A definitive failure whose message has an emoji across the 2,000-character cut.
const cut = newAction(
  'idem_cut_call',
  async (ctx) =>
    once(ctx, { request: { amount: 2 }, provider: 'fake' }, async () => {
      throw new OutcomeError({ kind: 'definitive', status: 400 }, `${'x'.repeat(1999)}😀 and more`);
    }),
  { maxAttempts: 3, backoff: () => 10 },
);
const Cut = newWorkflow('idem_cut', { nodes: { call: { action: cut } } });

beforeAll(async () => {
  db = await createTestDb();
  client = new Client({ connectionString: db.url, poolSize: 4 });
  worker = await startWorker(client, [Leaky, Cut]);
});

afterAll(async () => {
  await worker?.stop({ graceMs: 1_000 });
  await client?.close();
  await db?.drop();
});

it('the ledger row, and the step errors, keep no secret', async () => {
  const { runId } = await client.submit(Leaky, {});
  const run = await client.waitForRun(runId, { timeoutMs: 15_000, pollMs: 25 });
  expect(run.state).toBe('failed');
  const entry = await getLedgerEntry(client, `${runId}:call`);
  expect(entry?.phase).toBe('failed');
  expect(entry?.error?.message).toContain(`Basic ${REDACTED}`);
  expect(entry?.error?.reason).toContain(`sk_live_${REDACTED}`);
  const { rows } = await db.pool.query<{ t: string }>(
    `SELECT (SELECT error::text FROM cyclone.cyclone_idempotency WHERE run_id = $1)
            || (SELECT errors::text FROM cyclone.cyclone_steps WHERE run_id = $1) AS t`,
    [runId],
  );
  const stored = rows[0]?.t ?? '';
  for (const secret of [STRIPE_KEY, SENDGRID_KEY, BASIC]) expect(stored).not.toContain(secret);
});

// Regression, found by the bad-input catalogue (fixed): `storedFailure` cuts the message at 2,000 UTF-16 units
// without repairing a surrogate pair it cuts in two (core's `storableText` does). JSON.stringify
// writes the lone half as `\ud83d`, PostgreSQL's jsonb refuses it (22P02), and the outcome is not
// recorded: the row stays `started` with its call stamped, so the next attempt sees an unknown
// outcome instead of the definitive failure. `clean` in once.ts now uses storableText.
it('a definitive failure whose message is cut inside a surrogate pair is recorded', async () => {
  const { runId } = await client.submit(Cut, {});
  await client.waitForRun(runId, { timeoutMs: 15_000, pollMs: 25 });
  const entry = await getLedgerEntry(client, `${runId}:call`);
  expect(entry?.phase).toBe('failed');
  expect(entry?.error?.message.endsWith('\uFFFD')).toBe(true);
});
