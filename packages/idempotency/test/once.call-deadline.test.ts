/**
 * A request made long after the ledger stamped the call's start is refused unsent: a worker cut
 * off right after sending the stamp hears of its commit only when the network heals, possibly
 * after the quiet period, when another attempt or the operator may already have settled the key.
 * Here the late hearing is a pause inside the call, before its request.
 */
import * as http from 'node:http';
import { Client, type Context, newAction, newWorkflow, type Worker } from '@cyclone/core';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { DEADLINE_NOT_CONNECTED, deadlineAgent, getLedgerEntry, once } from '../src/index.js';
import { createTestDb, type TestDb } from './support/db.js';
import { startWorker, stepErrors } from './support/harness.js';
import { FakeProvider } from './support/provider.js';

let db: TestDb;
let client: Client;
let worker: Worker | undefined;
let provider: FakeProvider | undefined;

const agent = deadlineAgent('http:', 2_000);

/** POSTs one effect through the deadline agent; resolves with the status code. */
function post(url: string, key: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      `${url}/effects`,
      {
        method: 'POST',
        agent,
        headers: { 'content-type': 'application/json', 'idempotency-key': key },
      },
      (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
      },
    );
    req.on('error', reject);
    req.end(JSON.stringify({ to: 'x@example.com' }));
  });
}

interface Input {
  pauseMs: number;
}

// Quiet period 6 s: a request must be under way within max(6 − 5, 3) = 3 s of the stamp.
const send = newAction(
  'idem_call_deadline',
  async (ctx: Context, input: Input) =>
    once(ctx, { request: { to: 'x' }, quietPeriodMs: 6_000 }, async (key) => {
      await new Promise((r) => setTimeout(r, input.pauseMs));
      return { status: await post((provider as FakeProvider).url, key) };
    }),
  { maxAttempts: 1 },
);
const Flow = newWorkflow<Input>('idem_call_deadline', { nodes: { send: { action: send } } });

beforeAll(async () => {
  db = await createTestDb();
  client = new Client({ connectionString: db.url, poolSize: 4 });
});

afterEach(async () => {
  await worker?.stop({ graceMs: 1_000 });
  worker = undefined;
  await provider?.close();
});

afterAll(async () => {
  agent.destroy();
  await client.close();
  await db.drop();
});

describe('a request made after its call ran out of time since the ledger stamp', () => {
  it('is refused unsent: the provider never sees it, the ledger says no call was made', async () => {
    provider = await FakeProvider.start();
    worker = await startWorker(client, [Flow]);
    const { runId } = await client.submit(Flow, { pauseMs: 3_300 });
    const run = await client.waitForRun(runId, { timeoutMs: 20_000 });
    expect(run.state).toBe('failed');
    const errors = await stepErrors(db.pool, runId, 'send');
    expect(errors.at(-1)?.message).toMatch(/was not sent \(CYCLONE_DEADLINE_NOT_CONNECTED\)/);
    // Give a late request time to arrive, had it been sent.
    await new Promise((r) => setTimeout(r, 500));
    expect(provider.received).toHaveLength(0);
    // Not sent: the next attempt (an operator retry here) need not wait out the quiet period.
    const entry = await getLedgerEntry(client, `${runId}:send`);
    expect(entry?.phase).toBe('started');
    expect(entry?.callStartedAt ?? null).toBeNull();
    expect(errors.at(-1)?.message).toContain(DEADLINE_NOT_CONNECTED);
  });

  it('a request made within the time goes through', async () => {
    provider = await FakeProvider.start();
    worker = await startWorker(client, [Flow]);
    const { runId } = await client.submit(Flow, { pauseMs: 200 });
    const run = await client.waitForRun(runId, { timeoutMs: 20_000 });
    expect(run.state).toBe('completed');
    expect(provider.received).toHaveLength(1);
  });
});
