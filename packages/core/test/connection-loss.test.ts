/**
 * A connection that dies while the client has it checked out (a database restart, a failover,
 * `pg_terminate_backend`, a proxy reset) fails the operation that was using it and nothing
 * else: pg emits 'error' on such a client, and without a listener of ours that is an uncaught
 * exception that kills the process — a worker process too, through `ctx.client`. Each case runs
 * in a child process (support/connection-loss-child.ts) that must survive and keep working.
 */
import { killAllChildren, spawnWorker, waitFor } from '@cyclone/testkit';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createTestDb, type TestDb } from './support/db.js';

describe('a checked-out connection killed under the client', () => {
  let db: TestDb;

  beforeAll(async () => {
    db = await createTestDb();
  });

  afterEach(async () => {
    await killAllChildren();
  });

  afterAll(async () => {
    await killAllChildren();
    await db?.drop();
  });

  async function runScenario(scenario: 'cancel' | 'migrate') {
    const child = await spawnWorker({
      script: new URL('./support/connection-loss-child.ts', import.meta.url),
      env: { DATABASE_URL: db.url, SCENARIO: scenario },
      label: `connection-loss ${scenario}`,
    });
    const exit = await waitFor(`the ${scenario} child to exit`, () => child.exit);
    return { child, exit };
  }

  it('while cancel() waits for the run row: cancel() rejects, the process survives', async () => {
    const { child, exit } = await runScenario('cancel');
    expect(exit, child.describe()).toEqual({ code: 0, signal: null });
    expect(child.lines).toContain('SURVIVED');
    expect(child.lines.find((l) => l.startsWith('OUTCOME'))).toMatch(/^OUTCOME rejected: /);
    // The client's pool dropped the dead connection: the next cancel() works.
    expect(child.lines).toContain('AFTER cancelled');
  });

  it('while migrate() waits for the migration lock: migrate() rejects, the process survives', async () => {
    const { child, exit } = await runScenario('migrate');
    expect(exit, child.describe()).toEqual({ code: 0, signal: null });
    expect(child.lines).toContain('SURVIVED');
    expect(child.lines.find((l) => l.startsWith('OUTCOME'))).toMatch(/^OUTCOME rejected: /);
    expect(child.lines.find((l) => l.startsWith('AFTER'))).toMatch(/^AFTER migrated [1-9]/);
  });
});
