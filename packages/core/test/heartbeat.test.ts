/**
 * Heartbeats keep a long step's lease alive (ARCHITECTURE.md § The step lifecycle, 2): a handler
 * running 5× the lease on a live worker is never reclaimed, even with another worker sweeping
 * every 50 ms and ready to claim the step.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, Worker } from '../src/index.js';
import {
  invocations,
  runState,
  type StepRow,
  stepRow,
  waitFor,
  writes,
} from './support/crash-helpers.js';
import { CRASH_TABLES, configureCrash, SlowFlow } from './support/crash-workflows.js';
import { createTestDb, type TestDb } from './support/db.js';

const LEASE_MS = 600;
const HANDLER_MS = 5 * LEASE_MS;

let db: TestDb;
let client: Client;
const workers: Worker[] = [];

beforeAll(async () => {
  db = await createTestDb();
  await db.pool.query(CRASH_TABLES);
  configureCrash({ pool: db.pool, emit: () => {}, victim: false });
  client = new Client({ connectionString: db.url, poolSize: 2 });
});

afterAll(async () => {
  await Promise.all(workers.map((w) => w.stop({ graceMs: 1_000 }).catch(() => {})));
  await client?.close();
  await db?.drop();
});

describe('heartbeat', () => {
  it(`keeps a ${HANDLER_MS} ms handler's ${LEASE_MS} ms lease alive against an aggressive sweeper`, async () => {
    const a = new Worker({ client, workflows: [SlowFlow], leaseMs: LEASE_MS, pollIntervalMs: 50 });
    workers.push(a);
    await a.start();
    const { runId } = await client.submit(SlowFlow, { ms: HANDLER_MS });
    const claimed = await waitFor(
      'the slow step to be claimed by worker A',
      () => stepRow(db.pool, runId, 'step'),
      (s) => s.state !== 'available',
      10_000,
    );
    expect(claimed).toMatchObject({ state: 'running', attempt: 1, lease_owner: a.workerId });

    // B sweeps every 50 ms and runs the same workflow: a lapsed lease would be reclaimed at once.
    const b = new Worker({
      client,
      workflows: [SlowFlow],
      leaseMs: LEASE_MS,
      sweepIntervalMs: 50,
      pollIntervalMs: 50,
    });
    workers.push(b);
    await b.start();

    // Watch the step until it is terminal.
    const seen: StepRow[] = [];
    const done = await waitFor(
      'the slow step to finish',
      async () => {
        const s = await stepRow(db.pool, runId, 'step');
        seen.push(s);
        return s;
      },
      (s) => s.state !== 'running',
      HANDLER_MS + 15_000,
      25,
    );

    expect(done.state).toBe('completed');
    expect(done.attempt).toBe(1);
    expect(done.errors).toEqual([]);
    expect(done.errors.some((e) => e.kind === 'lease_expired')).toBe(false);
    // The handler's signal was never aborted (no lease loss seen by A's heartbeat either).
    expect(done.output).toEqual({ attempt: 1, aborted: false });
    // While it ran, it was always A's attempt 1, and nothing else.
    expect(new Set(seen.map((s) => `${s.state}/${s.attempt}/${s.lease_owner ?? '-'}`))).toEqual(
      new Set([
        `running/1/${a.workerId}`,
        ...(seen.at(-1)?.state === 'completed' ? ['completed/1/-'] : []),
      ]),
    );
    // It did run for 5 leases, and the lease was extended past several original leases.
    const started = (done.started_at as Date).getTime();
    expect((done.completed_at as Date).getTime() - started).toBeGreaterThanOrEqual(HANDLER_MS);
    const leaseEnds = seen.flatMap((s) =>
      s.lease_expires_at ? [s.lease_expires_at.getTime()] : [],
    );
    expect(Math.max(...leaseEnds) - started).toBeGreaterThan(3 * LEASE_MS);

    const inv = await invocations(db.pool, runId, 'step');
    expect(inv.map((i) => [i.run_id, i.node, i.attempt])).toEqual([[runId, 'step', 1]]);
    expect(await writes(db.pool, 'business', runId, 'step')).toHaveLength(1);
    expect(await runState(db.pool, runId)).toBe('completed');
    expect(b.stats.swept).toBe(0);
    expect(a.stats.leaseLost).toBe(0);
  });
});
