/**
 * A rolling deploy: version 2 of a workflow adds a node. A run submitted by v2 code may meet a
 * worker still running v1 (same workflow name). That worker runs the nodes it knows and leaves
 * the new one alone, for a v2 worker, instead of claiming it and discarding it ("this worker's
 * definition has no node") and so failing the run.
 */
import { waitFor } from '@cyclone/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, newAction, newWorkflow, Worker } from '../src/index.js';
import { createTestDb, type TestDb } from './support/db.js';

const a = newAction('deploy_a', async (ctx) => ({ node: ctx.node }));
const audit = newAction('deploy_audit', async (ctx) => ({ node: ctx.node }));
const V1 = newWorkflow('orders', { nodes: { a: { action: a } } });
const V2 = newWorkflow('orders', {
  nodes: { a: { action: a }, audit: { action: audit, after: ['a'] } },
});

describe('rolling deploy: a node only the new version has', () => {
  let db: TestDb;
  let client: Client;
  const workers: Worker[] = [];
  const start = async (w: Worker) => {
    workers.push(w);
    await w.start();
    return w;
  };

  beforeAll(async () => {
    db = await createTestDb();
    client = new Client({ connectionString: db.url, poolSize: 4 });
  });

  afterAll(async () => {
    await Promise.all(workers.map((w) => w.stop({ graceMs: 1_000 }).catch(() => {})));
    await client?.close();
    await db?.drop();
  });

  it('is left to a worker that knows it; the old worker runs the nodes it knows', async () => {
    const v1 = await start(
      new Worker({ client, workflows: [V1], concurrency: 4, pollIntervalMs: 100 }),
    );
    const { runId } = await client.submit(V2, {});

    // Node `a` exists in both versions: the v1 worker runs it, which makes `audit` available.
    await waitForStep(runId, 'a', 'completed');
    // A v1 run submitted now, claimed by the v1 worker, proves that worker has claimed after
    // `audit` became available (claims go in scheduled_at order): it passed `audit` over.
    const { runId: probe } = await client.submit(V1, {});
    expect((await client.waitForRun(probe, { timeoutMs: 10_000 })).state).toBe('completed');

    let run = await client.getRun(runId);
    expect(run.state).toBe('running');
    expect(run.steps.find((s) => s.node === 'audit')).toMatchObject({
      state: 'available',
      attempt: 0,
      errors: [],
    });
    expect(v1.stats.failed).toBe(0);

    // A v2 worker comes up and finishes the run.
    await start(new Worker({ client, workflows: [V2], pollIntervalMs: 100 }));
    run = await client.waitForRun(runId, { timeoutMs: 10_000 });
    expect(run.state).toBe('completed');
    expect(run.steps.map((s) => [s.node, s.state, s.attempt, s.errors.length])).toEqual([
      ['a', 'completed', 1, 0],
      ['audit', 'completed', 1, 0],
    ]);
  });

  /** Polls until `node` of the run is in `state`; a timeout names the state it is in. */
  function waitForStep(runId: string, node: string, state: string) {
    return waitFor(`node ${node} to be ${state}`, async () => {
      const s = (await client.getRun(runId)).steps.find((x) => x.node === node);
      if (s?.state !== state)
        throw new Error(`${node} is ${s?.state}: ${JSON.stringify(s?.errors)}`);
      return s;
    });
  }
});
