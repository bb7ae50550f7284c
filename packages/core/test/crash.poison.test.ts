/**
 * A poison step: its handler SIGKILLs the worker process running it, on every attempt. Workers
 * keep being restarted (as a supervisor would); the recovery sweep must discard the step once
 * its attempts are exhausted, so it cannot loop forever (ARCHITECTURE.md § The step lifecycle, 6).
 */
import { type ChildWorker, killAllChildren } from '@cyclone/testkit';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Client } from '../src/index.js';
import { spawnCrashWorker } from './support/child.js';
import { invocations, runState, stepRow, waitFor } from './support/crash-helpers.js';
import {
  CRASH_TABLES,
  CrashFlow,
  POISON_MAX_ATTEMPTS,
  PoisonFlow,
} from './support/crash-workflows.js';
import { createTestDb, type TestDb } from './support/db.js';

const LEASE_MS = 1000;
const SWEEP_MS = 250;
/** Restarts allowed before the test calls it an endless loop. */
const MAX_SPAWNS = POISON_MAX_ATTEMPTS + 4;

let db: TestDb;
let client: Client;

beforeAll(async () => {
  db = await createTestDb();
  await db.pool.query(CRASH_TABLES);
  client = new Client({ connectionString: db.url, poolSize: 2 });
});

afterEach(async () => {
  await killAllChildren();
});

afterAll(async () => {
  await killAllChildren();
  await client?.close();
  await db?.drop();
});

describe('poison step that kills its worker on every attempt', () => {
  it(`is discarded after exactly maxAttempts (${POISON_MAX_ATTEMPTS}) attempts, with lease_expired errors, and the run fails`, async () => {
    const { runId } = await client.submit(PoisonFlow, {});
    const t0 = Date.now();
    const dead: ChildWorker[] = [];
    let survivor: ChildWorker | undefined;

    // The supervisor loop: start a worker; it either dies of the poison or sees the step
    // discarded (then it is the survivor).
    for (let i = 1; i <= MAX_SPAWNS && !survivor; i++) {
      const w = await spawnCrashWorker({
        databaseUrl: db.url,
        leaseMs: LEASE_MS,
        sweepIntervalMs: SWEEP_MS,
        label: `P${i}`,
      });
      const outcome = await waitFor(
        `worker P${i} to die or the poison step to be discarded\n${w.describe()}`,
        async () =>
          w.exit
            ? 'died'
            : (await stepRow(db.pool, runId, 'step')).state === 'discarded'
              ? 'discarded'
              : '',
        (o) => o !== '',
        20_000,
      );
      if (outcome === 'died') {
        expect(w.exit?.signal, w.describe()).toBe('SIGKILL');
        dead.push(w);
      } else {
        survivor = w;
      }
    }

    expect(
      survivor,
      `the step was never discarded after ${MAX_SPAWNS} worker starts`,
    ).toBeDefined();
    // One worker died per attempt, no more: the 4th only swept the step to discarded.
    expect(dead).toHaveLength(POISON_MAX_ATTEMPTS);

    const step = await stepRow(db.pool, runId, 'step');
    expect(step).toMatchObject({
      state: 'discarded',
      attempt: POISON_MAX_ATTEMPTS,
      max_attempts: POISON_MAX_ATTEMPTS,
      lease_owner: null,
    });
    expect(step.errors.map((e) => [e.attempt, e.kind])).toEqual([
      [1, 'lease_expired'],
      [2, 'lease_expired'],
      [3, 'lease_expired'],
    ]);
    for (const [i, e] of step.errors.entries()) {
      expect(e.message).toMatch(/lease expired/i);
      expect(e.message).toContain(dead[i]?.workerId);
    }
    expect(await runState(db.pool, runId)).toBe('failed');

    // Each attempt ran in its own process, which it killed; same (runId, node) every time.
    const inv = await invocations(db.pool, runId, 'step');
    expect(inv.map((x) => [x.run_id, x.node, x.attempt, x.pid])).toEqual(
      dead.map((w, i) => [runId, 'step', i + 1, w.pid]),
    );

    // The survivor is alive and claiming, and never touches the discarded step again.
    const s = survivor as ChildWorker;
    const probe = await CrashFlow.submit(client, { crash: 'none' });
    const p = await waitFor(
      `probe run completed by the survivor\n${s.describe()}`,
      () => stepRow(db.pool, probe.runId, 'step'),
      (x) => x.state === 'completed',
      20_000,
    );
    expect(p.output).toEqual({ attempt: 1, pid: s.pid });
    expect(s.exit).toBeUndefined();
    expect(await stepRow(db.pool, runId, 'step')).toMatchObject({ state: 'discarded', attempt: 3 });
    expect(await invocations(db.pool, runId, 'step')).toHaveLength(POISON_MAX_ATTEMPTS);

    console.log(
      `poison: ${dead.length} worker deaths, discarded at attempt ${step.attempt} by P${dead.length + 1}, ` +
        `${Date.now() - t0} ms in all`,
    );
  });
});
