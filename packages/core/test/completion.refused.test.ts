/**
 * The database refuses a step's completion statement itself (not a lost connection, not a
 * deadlock): here a trigger raises, as a constraint, a full disk or a bad row would. The attempt
 * is recorded as failed, with the database's message and the action's backoff, instead of the
 * step sitting `running` until its lease expires and running again with its cause lost.
 */
import { waitFor } from '@cyclone/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, newAction, newWorkflow, type StepInfo, Worker } from '../src/index.js';
import { createTestDb, type TestDb } from './support/db.js';

let calls = 0;
const refused = newAction(
  'refused_completion',
  async () => {
    calls++;
    return { ok: true };
  },
  { maxAttempts: 3, backoff: () => 60_000 },
);
const Refused = newWorkflow('refused_completion', { nodes: { only: { action: refused } } });

describe('a completion the database refuses', () => {
  let db: TestDb;
  let client: Client;
  let worker: Worker;

  beforeAll(async () => {
    db = await createTestDb();
    await db.pool.query(`
      CREATE FUNCTION refuse_completion() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        RAISE EXCEPTION 'completion refused by a test trigger' USING ERRCODE = 'check_violation';
      END $$;
      CREATE TRIGGER refuse_completion BEFORE UPDATE ON cyclone.cyclone_steps FOR EACH ROW
        WHEN (OLD.state = 'running' AND NEW.state = 'completed'
              AND NEW.workflow = 'refused_completion')
        EXECUTE FUNCTION refuse_completion();
    `);
    client = new Client({ connectionString: db.url, poolSize: 2 });
    // A 30 s lease: a step left `running` would stay so far longer than we wait.
    worker = new Worker({ client, workflows: [Refused], leaseMs: 30_000 });
    await worker.start();
  });

  afterAll(async () => {
    await worker?.stop({ graceMs: 1_000 });
    await client?.close();
    await db?.drop();
  });

  it('is recorded as a failed attempt with the database error, retried after the backoff', async () => {
    const { runId } = await client.submit(Refused, {});
    const step = await waitFor(
      'the refused completion to be recorded as a failed attempt',
      async () => {
        const s = (await client.getRun(runId)).steps[0] as StepInfo;
        if (s.state !== 'retryable') throw new Error(`the step is ${s.state}`);
        return s;
      },
      { timeoutMs: 5_000 },
    );
    expect(step).toMatchObject({ attempt: 1, leaseOwner: null });
    expect(step.errors).toHaveLength(1);
    expect(step.errors[0]).toMatchObject({ attempt: 1, kind: 'error' });
    expect(step.errors[0]?.message).toContain('completion refused by a test trigger');
    // Scheduled after the action's backoff (60 s), not at once as a swept step would be.
    expect(step.scheduledAt.getTime() - Date.now()).toBeGreaterThan(50_000);
    expect(calls).toBe(1);
    await waitFor('the worker to count the failure', () => worker.stats.failed === 1);
    expect(worker.stats.completed).toBe(0);
  });
});
