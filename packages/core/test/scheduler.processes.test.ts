/**
 * Exactly one run per fire time, with real processes: a per-second schedule carried by 4 worker
 * processes for 10 s, one of them SIGKILLed half-way, at a fire time (perhaps inside its firing
 * transaction): every second of the window has exactly one run, with no gap and no duplicate,
 * and the runs complete.
 */
import { type ChildWorker, killAllChildren, spawnWorker, waitFor } from '@cyclone/testkit';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createTestDb, type TestDb } from './support/db.js';

let db: TestDb;

beforeAll(async () => {
  db = await createTestDb();
});

afterAll(async () => {
  await killAllChildren();
  await db?.drop();
});

async function dbNow(): Promise<number> {
  const { rows } = await db.pool.query<{ now: Date }>('SELECT now() AS now');
  return (rows[0] as { now: Date }).now.getTime();
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

it('4 worker processes, one SIGKILLed midway: one run per second for 10 s, no gap, no duplicate', async () => {
  const children: ChildWorker[] = await Promise.all(
    [0, 1, 2, 3].map((i) =>
      spawnWorker({
        script: new URL('./support/schedule-worker.ts', import.meta.url),
        env: { DATABASE_URL: db.url },
        label: `scheduler-${i}`,
        ready: /^READY (\d+) (\S+)$/,
        readyTimeoutMs: 40_000,
      }),
    ),
  );
  const start = await dbNow();
  await sleep(5_000);
  // Kill at a fire time (PostgreSQL's clock), when the workers are racing through the gate.
  const now = await dbNow();
  await sleep(Math.ceil(now / 1000) * 1000 - now + 2);
  const victim = children[0] as ChildWorker;
  const exit = await victim.kill('SIGKILL');
  expect(exit.signal, victim.describe()).toBe('SIGKILL');
  const killedAt = await dbNow();
  await sleep(5_500);
  const end = await dbNow();
  for (const c of children.slice(1)) expect(c.exit, c.describe()).toBeUndefined();

  // Every second from the first whole second after all four ran to the last one surely fired.
  const first = Math.ceil(start / 1000) * 1000;
  const last = Math.floor(end / 1000) * 1000 - 1000;
  expect(last - first).toBeGreaterThanOrEqual(9_000);
  const { rows } = await db.pool.query<{
    submit_key: string;
    input: { at: string };
    created_at: Date;
  }>(
    `SELECT submit_key, input, created_at FROM cyclone.cyclone_runs
     WHERE workflow = 'proc_tick' ORDER BY submit_key`,
  );
  const fireTimes = rows.map((r) => new Date(r.input.at).getTime());
  for (const r of rows) expect(r.submit_key).toBe(`schedule:per-second:${r.input.at}`);
  // No duplicate.
  expect(new Set(fireTimes).size).toBe(fireTimes.length);
  // No gap, from the first fire time to the last.
  const sorted = [...fireTimes].sort((a, b) => a - b);
  for (let i = 1; i < sorted.length; i++) {
    expect(
      sorted[i] as number,
      `gap after ${new Date(sorted[i - 1] as number).toISOString()}`,
    ).toBe((sorted[i - 1] as number) + 1000);
  }
  // Every second of the window, across the kill.
  const window = sorted.filter((t) => t >= first && t <= last);
  expect(window).toHaveLength((last - first) / 1000 + 1);
  expect(window.some((t) => t > killedAt)).toBe(true);

  const lateness = rows
    .map((r) => r.created_at.getTime() - new Date(r.input.at).getTime())
    .sort((a, b) => a - b);
  const p50 = lateness[Math.floor(lateness.length / 2)] as number;
  console.log(
    `per-second schedule, 4 processes: ${rows.length} runs, lateness p50 ${p50} ms, max ${lateness[lateness.length - 1]} ms`,
  );
  expect(lateness[0]).toBeGreaterThanOrEqual(0);
  expect(p50).toBeLessThan(250);

  // Every run is executed (by the survivors), and they stop gracefully.
  await waitFor('every run completed', async () => {
    const { rows: open } = await db.pool.query(
      `SELECT 1 FROM cyclone.cyclone_runs WHERE workflow = 'proc_tick' AND state <> 'completed'
       AND created_at < $1`,
      [new Date(end)],
    );
    return open.length === 0;
  });
  await Promise.all(children.slice(1).map((c) => c.kill('SIGTERM')));
  for (const c of children.slice(1)) expect(c.lines, c.describe()).toContain('STOPPED');
});
