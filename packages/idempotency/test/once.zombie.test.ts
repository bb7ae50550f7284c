/**
 * Issue test 3: a zombie attempt still in flight. Worker A claims the step, its call hangs at the
 * provider (fault `hold`) and A never heartbeats, so its lease expires; worker B sweeps and
 * claims the next attempts. B must not call while A's call may still be in flight: it snoozes
 * until the quiet period is over.
 */
import { Client, type Context, newAction, newWorkflow, type Worker } from '@cyclone/core';
import { NO_HEARTBEAT } from '@cyclone/core/internal';
import { waitFor } from '@cyclone/testkit';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { getLedgerEntry, once } from '../src/index.js';
import { createTestDb, type TestDb } from './support/db.js';
import { startWorker, stepErrors } from './support/harness.js';
import { FakeProvider, postEffect } from './support/provider.js';

let db: TestDb;
let client: Client;
let provider: FakeProvider;
const workers: Worker[] = [];

interface Input {
  policy: 'fail' | 'recall';
  quietPeriodMs: number;
}

const call = newAction(
  'idem_zombie',
  // The call ignores ctx.signal on purpose: like an SDK without abort support, it stays in
  // flight after its attempt lost the lease.
  async (ctx: Context, input: Input) =>
    once(
      ctx,
      { request: { n: 1 }, onUnknown: input.policy, quietPeriodMs: input.quietPeriodMs },
      (key) => postEffect(provider.url, key, { n: 1 }),
    ),
  { maxAttempts: 1000, backoff: () => 100 },
);
const ZombieFlow = newWorkflow<Input>('idem_zombie', { nodes: { call: { action: call } } });

beforeAll(async () => {
  db = await createTestDb();
  client = new Client({ connectionString: db.url, poolSize: 4 });
});

afterEach(async () => {
  provider.release();
  await Promise.all(workers.splice(0).map((w) => w.stop({ graceMs: 1_000 })));
  await provider.close();
});

afterAll(async () => {
  await client.close();
  await db.drop();
});

/** Runs attempt 1 on a worker that never heartbeats, until its call hangs at the provider. */
async function zombieInFlight(input: Input): Promise<{ runId: string; key: string }> {
  provider = await FakeProvider.start();
  provider.inject('hold');
  const zombie = await startWorker(client, [ZombieFlow], {
    concurrency: 1, // its only slot stays busy: it claims nothing else
    leaseMs: 400,
    [NO_HEARTBEAT]: true,
    sweepIntervalMs: 3_600_000,
  });
  workers.push(zombie);
  const { runId } = await client.submit(ZombieFlow, input);
  await waitFor('the call in flight at the provider', () => provider.holding === 1);
  workers.push(await startWorker(client, [ZombieFlow]));
  return { runId, key: `${runId}:call` };
}

/** The step, once one of its attempts snoozed (an "in progress" wait for the quiet period). */
const snoozed = (runId: string) =>
  waitFor('an attempt snoozing out the quiet period', async () => {
    const step = (await client.getRun(runId)).steps[0];
    return step && step.snoozes >= 1 ? step : undefined;
  });

describe('test 3: a zombie attempt still in flight', () => {
  it('the new attempt snoozes out the quiet period ("in progress") instead of calling concurrently', async () => {
    // Policy recall, the one that would call again: within the quiet period it must not.
    const { runId, key } = await zombieInFlight({ policy: 'recall', quietPeriodMs: 4_000 });
    const step = await snoozed(runId);
    // Snoozed until the quiet period is over (counted from the call, by the database clock),
    // with no error entry and no attempt used for it.
    expect(step.state).toBe('scheduled');
    const row = await getLedgerEntry(client, key);
    expect(row).toMatchObject({ phase: 'started', ownerAttempt: 1 });
    const callStarted = row?.callStartedAt?.getTime() ?? Number.NaN;
    expect(step.scheduledAt.getTime()).toBeGreaterThanOrEqual(callStarted + 4_000);
    expect(step.scheduledAt.getTime()).toBeLessThanOrEqual(callStarted + 4_000 + 1_000);
    expect(step.errors.map((e) => e.kind)).not.toContain('error');
    expect(provider.received).toHaveLength(1);

    // The zombie's call finally returns: it still owns the row and records the success; its
    // step completion is fenced out, and the attempt after the snooze replays the stored result.
    provider.release();
    const run = await client.waitForRun(runId, { timeoutMs: 20_000 });
    expect(run.state).toBe('completed');
    expect(run.steps[0]?.attempt).toBeGreaterThanOrEqual(3);
    expect(run.steps[0]?.output).toMatchObject({ id: provider.effects[0]?.id });
    expect(provider.received).toHaveLength(1);
    expect(provider.effects).toHaveLength(1);
    expect(await getLedgerEntry(client, key)).toMatchObject({
      phase: 'succeeded',
      ownerAttempt: 1,
      calls: 1,
    });
    await waitFor('the zombie fenced out', () => (workers[0]?.stats.leaseLost ?? 0) >= 1);
  });

  it("after the quiet period policy 'fail' discards the step; the zombie's late success is still recorded and replayed on an operator retry", async () => {
    const { runId, key } = await zombieInFlight({ policy: 'fail', quietPeriodMs: 600 });
    const run = await client.waitForRun(runId, { timeoutMs: 20_000 });
    expect(run.state).toBe('failed');
    const errors = await stepErrors(db.pool, runId, 'call');
    expect(errors.at(-1)?.message).toMatch(/unknown outcome/);
    expect(errors.filter((e) => /may still be in progress/.test(e.message))).toEqual([]);
    expect(run.steps[0]?.snoozes).toBeGreaterThanOrEqual(1);
    expect(provider.received).toHaveLength(1);
    expect(await getLedgerEntry(client, key)).toMatchObject({ phase: 'unknown' });

    provider.release();
    await waitFor(
      'the zombie recording its success',
      async () => (await getLedgerEntry(client, key))?.phase === 'succeeded',
    );
    await client.retry(runId, 'call');
    const again = await client.waitForRun(runId, { timeoutMs: 20_000 });
    expect(again.state).toBe('completed');
    expect(again.steps[0]?.output).toMatchObject({ id: provider.effects[0]?.id });
    expect(provider.received).toHaveLength(1);
  });
});
