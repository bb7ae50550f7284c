/**
 * The crash matrix (ARCHITECTURE.md § The crash matrix), row by row, with real worker child
 * processes: worker A (the victim, lease 1 s) stops at a precise point of the step and is
 * SIGKILLed there (or stalls, alive); worker B (a fresh process, sweep every 250 ms) must recover
 * the step as the design promises. Handlers record each invocation, their completionTx writes
 * (`business`, no unique constraint) and their external effects (`effects_raw`, no dedupe;
 * `effects_keyed`, deduplicated by the `(runId, node)` key) in tables of the test database.
 * Run directly and through PgBouncer (vitest.pgbouncer.config.ts): the workers' and the client's
 * way in (`engineUrl`), the assertions on a direct pool.
 */
import { rmSync, writeFileSync } from 'node:fs';
import {
  type ChildWorker,
  engineClientOptions,
  engineUrl,
  killAllChildren,
} from '@cyclone/testkit';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Client } from '../src/index.js';
import { spawnCrashWorker } from './support/child.js';
import {
  dbNow,
  invocations,
  keyedEffects,
  runState,
  stepRow,
  waitFor,
  writes,
} from './support/crash-helpers.js';
import { ChainFlow, CRASH_TABLES, CrashFlow, goFile } from './support/crash-workflows.js';
import { createTestDb, type TestDb } from './support/db.js';

const LEASE_MS = 1000;
const SWEEP_MS = 250;
/** Generous: lease + sweep + process start, on a loaded machine. */
const RECOVERY_DEADLINE_MS = 20_000;

let db: TestDb;
let client: Client;
const observed: Record<string, unknown>[] = [];

beforeAll(async () => {
  db = await createTestDb();
  await db.pool.query(CRASH_TABLES);
  client = new Client({ connectionString: engineUrl(db.url), poolSize: 2, ...engineClientOptions });
});

afterEach(async () => {
  await killAllChildren();
});

afterAll(async () => {
  await killAllChildren();
  await client?.close();
  await db?.drop();
  if (observed.length) console.log(`crash matrix, observed:\n${JSON.stringify(observed, null, 1)}`);
});

const victim = (label = 'A') =>
  spawnCrashWorker({
    databaseUrl: engineUrl(db.url),
    victim: true,
    leaseMs: LEASE_MS,
    sweepIntervalMs: SWEEP_MS,
    label,
  });
const rescuer = (label = 'B') =>
  spawnCrashWorker({
    databaseUrl: engineUrl(db.url),
    victim: false,
    leaseMs: LEASE_MS,
    sweepIntervalMs: SWEEP_MS,
    label,
  });

/** SIGKILLs A, checks it died of it, and returns the step as A left it plus the kill time. */
async function killVictim(a: ChildWorker, runId: string, node: string) {
  const exit = await a.kill('SIGKILL');
  expect(exit.signal, a.describe()).toBe('SIGKILL');
  const killedAt = await dbNow(db.pool);
  const left = await stepRow(db.pool, runId, node);
  return { killedAt, left };
}

const waitStep = (runId: string, node: string, states: string[], b?: ChildWorker) =>
  waitFor(
    `step ${node} of run ${runId} in ${states.join('|')}${b ? `\n${b.describe()}` : ''}`,
    () => stepRow(db.pool, runId, node),
    (s) => states.includes(s.state),
    RECOVERY_DEADLINE_MS,
  );

/** Expects exactly one recorded error: the killed attempt's lease expiry. */
function expectLeaseExpired(
  errors: { attempt: number; kind: string; message: string }[],
  attempt = 1,
) {
  expect(errors).toHaveLength(1);
  expect(errors[0]).toMatchObject({ attempt, kind: 'lease_expired' });
  expect(errors[0]?.message).toMatch(/lease expired/i);
}

describe('crash matrix with real worker processes (SIGKILL)', () => {
  it('row 1 — stops before the side effect: running until the lease expires, then swept and run again as attempt 2', async () => {
    const { runId } = await CrashFlow.submit(client, { crash: 'before_effect' });
    const a = await victim();
    await a.waitForLine(new RegExp(`^BEFORE_EFFECT ${runId} step 1$`));
    const held = await stepRow(db.pool, runId, 'step');
    expect(held).toMatchObject({ state: 'running', attempt: 1, lease_owner: a.workerId });

    const { killedAt, left } = await killVictim(a, runId, 'step');
    // Nobody else is alive: the dead worker's step stays running (its lease is not yet swept).
    expect(left).toMatchObject({ state: 'running', attempt: 1, lease_owner: a.workerId });
    const leaseEnd = left.lease_expires_at as Date;

    const b = await rescuer();
    const done = await waitStep(runId, 'step', ['completed', 'discarded'], b);
    expect(done.state).toBe('completed');
    expect(done.attempt).toBe(2);
    expect(done.output).toEqual({ attempt: 2, pid: b.pid });
    expectLeaseExpired(done.errors);
    expect(done.errors[0]?.message).toContain(a.workerId);

    const inv = await invocations(db.pool, runId, 'step');
    // Same identity across the reclaim: ctx.runId and ctx.node as the handler saw them.
    expect(inv.map((i) => [i.run_id, i.node, i.attempt, i.pid])).toEqual([
      [runId, 'step', 1, a.pid],
      [runId, 'step', 2, b.pid],
    ]);
    // Not reclaimed before A's lease had expired (both times on the database clock).
    const second = inv[1] as (typeof inv)[number];
    expect(second.at.getTime()).toBeGreaterThanOrEqual(leaseEnd.getTime());
    // The effect happened once (only attempt 2 got that far); completionTx rows exactly once.
    expect(await writes(db.pool, 'effects_raw', runId, 'step')).toEqual([
      { attempt: 2, pid: b.pid },
    ]);
    expect(await writes(db.pool, 'business', runId, 'step')).toEqual([{ attempt: 2, pid: b.pid }]);
    expect(await runState(db.pool, runId)).toBe('completed');

    observed.push({
      row: 1,
      case: 'before the side effect',
      attempts: done.attempt,
      errors: done.errors.map((e) => `${e.attempt}:${e.kind}`),
      recoveredMsAfterKill: second.at.getTime() - killedAt.getTime(),
      recoveredMsAfterLeaseEnd: second.at.getTime() - leaseEnd.getTime(),
      effectsRaw: 1,
      business: 1,
    });
  });

  it('row 2 — stops after an external side effect, before the completion commit: run again, the key removes the duplicate, completionTx writes once', async () => {
    const { runId } = await CrashFlow.submit(client, { crash: 'after_effect' });
    const a = await victim();
    await a.waitForLine(new RegExp(`^AFTER_EFFECT ${runId} step 1$`));
    // The external effect is committed; the completionTx write is not (its transaction is open).
    expect(await writes(db.pool, 'effects_raw', runId, 'step')).toEqual([
      { attempt: 1, pid: a.pid },
    ]);
    expect(await writes(db.pool, 'business', runId, 'step')).toEqual([]);

    const { killedAt, left } = await killVictim(a, runId, 'step');
    expect(left).toMatchObject({ state: 'running', attempt: 1 });
    const leaseEnd = left.lease_expires_at as Date;

    const b = await rescuer();
    const done = await waitStep(runId, 'step', ['completed', 'discarded'], b);
    expect(done).toMatchObject({
      state: 'completed',
      attempt: 2,
      output: { attempt: 2, pid: b.pid },
    });
    expectLeaseExpired(done.errors);

    const inv = await invocations(db.pool, runId, 'step');
    expect(inv.map((i) => [i.run_id, i.node, i.attempt, i.pid])).toEqual([
      [runId, 'step', 1, a.pid],
      [runId, 'step', 2, b.pid],
    ]);
    const second = inv[1] as (typeof inv)[number];
    expect(second.at.getTime()).toBeGreaterThanOrEqual(leaseEnd.getTime());
    // Outside Postgres the effect happened twice (at least once)...
    const raw = await writes(db.pool, 'effects_raw', runId, 'step');
    expect(raw).toEqual([
      { attempt: 1, pid: a.pid },
      { attempt: 2, pid: b.pid },
    ]);
    // ...under one (runId, node) key, stable across attempts, which leaves exactly one effect:
    // the first attempt's.
    const keys = await db.pool.query('SELECT DISTINCT key FROM effects_raw WHERE run_id = $1', [
      runId,
    ]);
    expect(keys.rows).toEqual([{ key: `${runId}:step` }]);
    expect(await keyedEffects(db.pool, runId, 'step')).toEqual([
      { key: `${runId}:step`, attempt: 1, pid: a.pid },
    ]);
    // A's completionTx write died with its transaction: exactly one business row, B's.
    expect(await writes(db.pool, 'business', runId, 'step')).toEqual([{ attempt: 2, pid: b.pid }]);
    expect(await runState(db.pool, runId)).toBe('completed');

    observed.push({
      row: 2,
      case: 'after the external effect, before the completion commit',
      attempts: done.attempt,
      errors: done.errors.map((e) => `${e.attempt}:${e.kind}`),
      recoveredMsAfterKill: second.at.getTime() - killedAt.getTime(),
      recoveredMsAfterLeaseEnd: second.at.getTime() - leaseEnd.getTime(),
      effectsRaw: raw.length,
      effectsKeyed: 1,
      business: 1,
    });
  });

  it('row 3 — stops after the completion commit: the completed step never runs again, the run goes on', async () => {
    const { runId } = await ChainFlow.submit(client, { crash: 'after_commit' });
    const a = await victim();
    // A completed `first` (committed) and is now inside `second`.
    await a.waitForLine(new RegExp(`^HOLDING_NEXT ${runId} second 1$`));
    const first = await stepRow(db.pool, runId, 'first');
    expect(first).toMatchObject({
      state: 'completed',
      attempt: 1,
      output: { attempt: 1, pid: a.pid },
    });
    expect(await writes(db.pool, 'business', runId, 'first')).toEqual([{ attempt: 1, pid: a.pid }]);

    const { killedAt, left } = await killVictim(a, runId, 'second');
    expect(left).toMatchObject({ state: 'running', attempt: 1 });

    const b = await rescuer();
    await waitFor(
      `run ${runId} terminal\n${b.describe()}`,
      () => runState(db.pool, runId),
      (s) => s !== 'running',
      RECOVERY_DEADLINE_MS,
    );
    expect(await runState(db.pool, runId)).toBe('completed');
    const second = await stepRow(db.pool, runId, 'second');
    expect(second).toMatchObject({
      state: 'completed',
      attempt: 2,
      output: { attempt: 2, pid: b.pid },
    });
    expectLeaseExpired(second.errors);

    // B is demonstrably alive and claiming after that sweep: it runs a fresh probe run.
    const probe = await CrashFlow.submit(client, { crash: 'none' });
    const p = await waitStep(probe.runId, 'step', ['completed', 'discarded'], b);
    expect(p.output).toEqual({ attempt: 1, pid: b.pid });

    // `first` ran exactly once, in A; B never ran it; its effects exist exactly once.
    const after = await stepRow(db.pool, runId, 'first');
    expect(after).toMatchObject({
      state: 'completed',
      attempt: 1,
      output: { attempt: 1, pid: a.pid },
    });
    expect(after.errors).toEqual([]);
    expect(
      (await invocations(db.pool, runId, 'first')).map((i) => [i.run_id, i.node, i.attempt, i.pid]),
    ).toEqual([[runId, 'first', 1, a.pid]]);
    expect(await writes(db.pool, 'business', runId, 'first')).toEqual([{ attempt: 1, pid: a.pid }]);
    expect(await writes(db.pool, 'effects_raw', runId, 'first')).toEqual([
      { attempt: 1, pid: a.pid },
    ]);
    expect(await writes(db.pool, 'business', runId, 'second')).toEqual([
      { attempt: 2, pid: b.pid },
    ]);

    const inv2 = await invocations(db.pool, runId, 'second');
    observed.push({
      row: 3,
      case: 'after the completion commit',
      first: { attempts: after.attempt, invocations: 1, business: 1 },
      second: {
        attempts: second.attempt,
        errors: second.errors.map((e) => `${e.attempt}:${e.kind}`),
      },
      downstreamRecoveredMsAfterKill: (inv2[1]?.at.getTime() ?? Number.NaN) - killedAt.getTime(),
    });
  });

  it('row 4 — alive but slow (event loop stalled past its lease): another worker runs it again; the slow completion is fenced out', async () => {
    const { runId } = await CrashFlow.submit(client, { crash: 'stall' });
    const releaseA = goFile(runId, 'a');
    const releaseB = goFile(runId, 'b');
    try {
      const a = await victim();
      // A holds an open completionTx with its business row, has made the external effect, and
      // now blocks its event loop: no heartbeat goes out, the process stays alive.
      await a.waitForLine(new RegExp(`^STALLED ${runId} step 1$`));
      const stalledAt = await dbNow(db.pool);

      // B reclaims the step once A's lease has expired and is inside attempt 2 (its business row
      // written on its own open completionTx), waiting.
      const b = await rescuer();
      await b.waitForLine(new RegExp(`^WAITING ${runId} step 2$`), RECOVERY_DEADLINE_MS);
      const reclaimed = await stepRow(db.pool, runId, 'step');
      expect(reclaimed).toMatchObject({ state: 'running', attempt: 2, lease_owner: b.workerId });
      expectLeaseExpired(reclaimed.errors);
      expect(a.exit, 'A must still be alive (slow, not dead)').toBeUndefined();

      // A wakes up while B holds attempt 2: its handler returns at once and its worker tries to
      // complete attempt 1 before any heartbeat could tell it the lease is gone. A graceful stop
      // then waits for that in-flight outcome to be handled.
      writeFileSync(releaseA, '');
      await a.waitForLine(new RegExp(`^RESUMED ${runId} step 1$`));
      a.proc.kill('SIGTERM');
      await a.waitForLine(/^STOPPED$/);
      const exit = await a.exited;
      expect(exit.code, a.describe()).toBe(0);

      // A's late completion was fenced out: B's claim is untouched, nothing was recorded, and
      // A's completionTx write was rolled back (B's is not committed yet).
      const afterA = await stepRow(db.pool, runId, 'step');
      expect(afterA).toMatchObject({
        state: 'running',
        attempt: 2,
        lease_owner: b.workerId,
        output: null,
      });
      expectLeaseExpired(afterA.errors);
      expect(await writes(db.pool, 'business', runId, 'step')).toEqual([]);
      expect(await runState(db.pool, runId)).toBe('running');

      // B finishes: its completion stands, its completionTx write is the only one.
      writeFileSync(releaseB, '');
      const done = await waitStep(runId, 'step', ['completed', 'discarded'], b);
      expect(done).toMatchObject({
        state: 'completed',
        attempt: 2,
        output: { attempt: 2, pid: b.pid },
      });
      expectLeaseExpired(done.errors);
      expect(await writes(db.pool, 'business', runId, 'step')).toEqual([
        { attempt: 2, pid: b.pid },
      ]);
      // The external effect did happen twice; the key leaves one.
      expect(await writes(db.pool, 'effects_raw', runId, 'step')).toEqual([
        { attempt: 1, pid: a.pid },
        { attempt: 2, pid: b.pid },
      ]);
      expect(await keyedEffects(db.pool, runId, 'step')).toHaveLength(1);
      expect(await runState(db.pool, runId)).toBe('completed');
      const inv = await invocations(db.pool, runId, 'step');
      expect(inv.map((i) => [i.run_id, i.node, i.attempt, i.pid])).toEqual([
        [runId, 'step', 1, a.pid],
        [runId, 'step', 2, b.pid],
      ]);

      observed.push({
        row: 4,
        case: 'alive but slow (event loop blocked), late completion fenced',
        attempts: done.attempt,
        errors: done.errors.map((e) => `${e.attempt}:${e.kind}`),
        recoveredMsAfterStall: (inv[1]?.at.getTime() ?? Number.NaN) - stalledAt.getTime(),
        slowWorkerLoggedFencedOut: /completion fenced out/.test(a.stderr),
        business: 1,
      });
    } finally {
      rmSync(releaseA, { force: true });
      rmSync(releaseB, { force: true });
    }
  });

  it('row 5 — the handler throws: its completionTx write is rolled back, retryable, attempt 2 after the backoff', async () => {
    const { runId } = await CrashFlow.submit(client, { crash: 'throw' });
    const w = await rescuer('W');
    const done = await waitStep(runId, 'step', ['completed', 'discarded'], w);
    expect(done).toMatchObject({
      state: 'completed',
      attempt: 2,
      output: { attempt: 2, pid: w.pid },
    });
    expect(done.errors).toHaveLength(1);
    expect(done.errors[0]).toMatchObject({ attempt: 1, kind: 'error' });
    expect(done.errors[0]?.message).toContain('attempt 1 throws after its completionTx write');
    expect(await writes(db.pool, 'business', runId, 'step')).toEqual([{ attempt: 2, pid: w.pid }]);
    expect(await writes(db.pool, 'effects_raw', runId, 'step')).toEqual([
      { attempt: 2, pid: w.pid },
    ]);
    const inv = await invocations(db.pool, runId, 'step');
    expect(inv.map((i) => [i.run_id, i.node, i.attempt])).toEqual([
      [runId, 'step', 1],
      [runId, 'step', 2],
    ]);
    // The action's backoff is 100 ms: attempt 2 did not start before it elapsed.
    const gap = (inv[1]?.at.getTime() ?? 0) - (inv[0]?.at.getTime() ?? 0);
    expect(gap).toBeGreaterThanOrEqual(100);
    expect(await runState(db.pool, runId)).toBe('completed');
    observed.push({
      row: 5,
      case: 'handler throws',
      attempts: done.attempt,
      errors: ['1:error'],
      retryGapMs: gap,
    });
  });
});
