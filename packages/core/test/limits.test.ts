/**
 * Limits that PostgreSQL and Node impose, enforced up front with a typed error instead of
 * failing later:
 * - a schema name is at most 55 characters: the NOTIFY channel `cyclone_<schema>` must fit
 *   PostgreSQL's 63-byte identifiers (a longer one migrated, then every submit failed);
 * - an action timeout and the worker's durations are at most 2³¹ − 1 ms, the longest delay of
 *   Node's timers (a longer one fired at once: a "30 days" timeout timed every attempt out).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  Client,
  ConfigError,
  newAction,
  newWorkflow,
  Worker,
  WorkflowDefinitionError,
} from '../src/index.js';
import { createTestDb, type TestDb } from './support/db.js';

const MAX_TIMER_MS = 2 ** 31 - 1;

describe('limits', () => {
  let db: TestDb;
  let client: Client;
  const clients: Client[] = [];
  const workers: Worker[] = [];

  beforeAll(async () => {
    db = await createTestDb();
    client = new Client({ connectionString: db.url, poolSize: 2 });
    clients.push(client);
  });

  afterAll(async () => {
    await Promise.all(workers.map((w) => w.stop({ graceMs: 1_000 }).catch(() => {})));
    await Promise.all(clients.map((c) => c.close()));
    await db?.drop();
  });

  it('a schema name longer than 55 characters is refused; one of 55 works end to end', async () => {
    for (const schema of ['s'.repeat(56), 's'.repeat(63)]) {
      expect(
        () => new Client({ connectionString: db.url, schema }),
        `${schema.length} characters`,
      ).toThrow(ConfigError);
    }

    // The longest accepted: migrate, submit (NOTIFY on a 63-byte channel), LISTEN pickup.
    const schema = `s${'x'.repeat(54)}`;
    const longest = new Client({ connectionString: db.url, schema, poolSize: 2 });
    clients.push(longest);
    expect(longest.db.channel).toHaveLength(63);
    await longest.migrate();
    const wf = newWorkflow('long_schema', {
      nodes: { only: { action: newAction('long_schema', async () => ({ ok: true })) } },
    });
    // Polling far slower than the wait below: the run is picked up through NOTIFY.
    const worker = new Worker({ client: longest, workflows: [wf], pollIntervalMs: 60_000 });
    workers.push(worker);
    await worker.start();
    const { runId } = await longest.submit(wf, {});
    const run = await longest.waitForRun(runId, { timeoutMs: 10_000 });
    expect(run.state).toBe('completed');
  });

  it('an action timeout beyond 2³¹ − 1 ms is refused when defined; the longest accepted does not fire early', async () => {
    for (const timeout of [MAX_TIMER_MS + 1, 30 * 24 * 3600 * 1000]) {
      expect(() => newAction('too_long', async () => null, { timeout }), String(timeout)).toThrow(
        WorkflowDefinitionError,
      );
    }
    const longest = newAction(
      'longest_timeout',
      async () => {
        await new Promise((r) => setTimeout(r, 100));
        return { done: true };
      },
      { timeout: MAX_TIMER_MS, maxAttempts: 1 },
    );
    const wf = newWorkflow('longest_timeout', { nodes: { only: { action: longest } } });
    const worker = new Worker({ client, workflows: [wf], pollIntervalMs: 50 });
    workers.push(worker);
    await worker.start();
    const { runId } = await client.submit(wf, {});
    const run = await client.waitForRun(runId, { timeoutMs: 10_000 });
    expect(run.steps[0]).toMatchObject({ state: 'completed', output: { done: true }, errors: [] });
  });

  it('a heartbeat interval above half the lease → ConfigError naming both', async () => {
    const wf = newWorkflow('limits_beat', {
      nodes: { only: { action: newAction('limits_beat', async () => null) } },
    });
    for (const heartbeatIntervalMs of [501, 999, 1_000, 1_500]) {
      expect(
        () => new Worker({ client, workflows: [wf], leaseMs: 1_000, heartbeatIntervalMs }),
      ).toThrow(
        new ConfigError(
          `heartbeatIntervalMs (${heartbeatIntervalMs}) must be at most half of leaseMs (1000): ` +
            'each beat is timed from the end of the last, so a longer interval lets the lease lapse while its handler runs',
        ),
      );
    }
    // Only the interval given: the default lease (5,000 ms) applies.
    expect(() => new Worker({ client, workflows: [wf], heartbeatIntervalMs: 2_501 })).toThrow(
      /heartbeatIntervalMs \(2501\) must be at most half of leaseMs \(5000\)/,
    );
    await new Worker({ client, workflows: [wf], leaseMs: 1_000, heartbeatIntervalMs: 500 }).stop();
  });

  it.each(['leaseMs', 'heartbeatIntervalMs', 'sweepIntervalMs', 'pollIntervalMs'] as const)(
    'Worker option %s beyond 2³¹ − 1 ms → ConfigError',
    async (option) => {
      const wf = newWorkflow('limits_noop', {
        nodes: { only: { action: newAction('limits_noop', async () => null) } },
      });
      // The heartbeat interval must also stay below the lease: give it the longest lease.
      const lease = option === 'heartbeatIntervalMs' ? { leaseMs: MAX_TIMER_MS } : {};
      expect(
        () => new Worker({ client, workflows: [wf], ...lease, [option]: MAX_TIMER_MS + 1 }),
      ).toThrow(ConfigError);
      // The limit itself is accepted (the worker is never started); the heartbeat's is half the lease.
      const limit = option === 'heartbeatIntervalMs' ? Math.floor(MAX_TIMER_MS / 2) : MAX_TIMER_MS;
      await new Worker({ client, workflows: [wf], ...lease, [option]: limit }).stop();
    },
  );
});
