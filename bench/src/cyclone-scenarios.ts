/**
 * Cyclone-only measurements (rows 9–12): time (issue 14: delayed runs due at one instant, timer
 * lateness, a backlog of future-dated steps) and signals to wait nodes (issue 16). Each row's
 * ratio is taken to a tuned no-op figure of the same harness run and the same build. The peers
 * have delayed jobs (graphile-worker `runAt`, pg-boss `startAfter`) but are not measured here;
 * neither has signals or wait nodes.
 *
 * Every instant these rows compare is PostgreSQL's: a due time is chosen from the database's
 * clock, and a worker's end time (CLOCK_MONOTONIC) is placed on that clock by `readDbClock`.
 */
import { Client } from '@cyclone/core';
import type pg from 'pg';
import { cpuDelta } from './admin.js';
import { ChildWorker } from './child-process.js';
import type { DrainResult } from './protocol.js';
import { type BenchContext, START_TIMEOUT_MS, withFreshDb, withPool } from './scenarios.js';
import { noopFlow, WAIT_SIGNAL, waitFlow } from './systems/cyclone.js';
import { chunks, mapLimit, msBetween, nowNs, quantile, sleep } from './util.js';

/** Submits per `submitMany` call, as in row 1. */
const CHUNK = 1_000;

/**
 * Row 9's due time is this far after the submit began, plus `DUE_LEAD_MS_PER_STEP` per step, so
 * that the insert and the worker's start-up end before it (checked; a run where they did not
 * fails with a message that says so).
 */
const DUE_LEAD_MS = 3_000;
const DUE_LEAD_MS_PER_STEP = 0.05;
/** Row 9's lead for `n` steps: from the start of the insert to the due time. */
export const dueLeadMs = (n: number) => DUE_LEAD_MS + n * DUE_LEAD_MS_PER_STEP;
/** The worker must be ready at least this long before the due time. */
const DUE_MIN_MARGIN_MS = 300;

/** Row 10's first timer is due this long after the worker is ready, plus 2 ms per timer. */
const TIMER_LEAD_MS = 1_000;

/** Row 11's steps are due between 1 h and 25 h after their submit. */
const BACKLOG_FROM_MS = 3_600_000;
const BACKLOG_SPAN_MS = 24 * 3_600_000;

/** Row 12: signals in flight (the producer's pool). */
const SIGNALS_IN_FLIGHT = 10;
/** Row 12: the worker's concurrency, which must suffice however many runs wait. */
const SIGNAL_CONCURRENCY = 10;

/** A reading of the database's clock and the CLOCK_MONOTONIC instant it maps to. */
export interface DbClock {
  /** `clock_timestamp()`, ms since the epoch (µs precision). */
  dbMs: number;
  /** `nowNs()` at the middle of the round trip that read it. */
  monoNs: bigint;
}

/** Reads the database's clock; the reading with the shortest round trip of 5. */
export async function readDbClock(pool: pg.Pool): Promise<DbClock> {
  let best: (DbClock & { rttNs: bigint }) | undefined;
  for (let i = 0; i < 5; i++) {
    const t1 = nowNs();
    const { rows } = await pool.query<{ ms: number }>(
      'SELECT (extract(epoch FROM clock_timestamp()) * 1000)::float8 AS ms',
    );
    const t2 = nowNs();
    const rttNs = t2 - t1;
    if (!best || rttNs < best.rttNs) {
      best = { dbMs: Number(rows[0]?.ms), monoNs: t1 + rttNs / 2n, rttNs };
    }
  }
  const { dbMs, monoNs } = best as DbClock;
  return { dbMs, monoNs };
}

/** The CLOCK_MONOTONIC ns of database instant `dbMs`, by `clock`. */
const monoOf = (clock: DbClock, dbMs: number): bigint =>
  clock.monoNs + BigInt(Math.round((dbMs - clock.dbMs) * 1e6));

/**
 * Row 9: `n` single-node runs submitted with one `runAt` (`submitMany`, 1,000 per call, untimed),
 * a little in the future by the database's clock; then a tuned worker child starts and sleeps
 * until then. Timed from the due instant to the moment the worker knows its last completion
 * committed (`worker.stats.completed`, as in row 2). Records steps per second.
 */
export async function dueBurst(
  ctx: BenchContext,
  row: string,
  n: number,
  capMs: number,
): Promise<void> {
  await withFreshDb(ctx, 'cyclone', async (db, url) => {
    const leadMs = dueLeadMs(n);
    const dueMs = Math.ceil((await withPool(url, readDbClock)).dbMs + leadMs);
    const runAt = new Date(dueMs);
    const producer = new Client({ connectionString: url, poolSize: 1 });
    try {
      for (const k of chunks(n, CHUNK)) {
        await producer.submitMany(
          noopFlow,
          Array.from({ length: k }, () => ({})),
          { runAt },
        );
      }
    } finally {
      await producer.close();
    }
    await ctx.admin.waitIdle(db);
    const before = await ctx.admin.counters(db);
    const child = new ChildWorker({
      system: 'cyclone',
      mode: 'drain',
      url,
      variant: 'tuned',
      workload: 'noop',
      expected: n,
      capMs: leadMs + capMs,
    });
    try {
      await child.waitFor('@READY', START_TIMEOUT_MS);
      // The harness's connection stays open through the run (a few statements, in the counters).
      const m = await withPool(url, async (pool) => {
        const clock = await readDbClock(pool);
        const margin = dueMs - clock.dbMs;
        if (margin < DUE_MIN_MARGIN_MS) {
          throw new Error(
            `the insert and the worker's start took ${Math.round(leadMs - margin)} ms, past the due time (${leadMs} ms after the start of the insert): not measured`,
          );
        }
        await child.waitFor('@T0', margin + START_TIMEOUT_MS);
        const cpu0 = await ctx.admin.backendCpu(db);
        const r = JSON.parse(await child.waitFor('@DONE', capMs + START_TIMEOUT_MS)) as DrainResult;
        const cpu1 = await ctx.admin.backendCpu(db);
        // The database's view: every step was due at that instant; when the first one started
        // and when the last completion's transaction began, after the due time.
        const { rows } = await pool.query<{ off: number; first: number; last: number }>(
          `SELECT count(*) FILTER (WHERE scheduled_at <> $1)::int AS off,
                  (extract(epoch FROM min(started_at) - $1) * 1000)::float8 AS first,
                  (extract(epoch FROM max(completed_at) - $1) * 1000)::float8 AS last
           FROM cyclone.cyclone_steps WHERE workflow = 'bench_noop'`,
          [runAt],
        );
        return {
          clock,
          margin,
          r,
          cpu0,
          cpu1,
          db: rows[0] as { off: number; first: number; last: number },
        };
      });
      await child.exit();
      await ctx.admin.waitIdle(db);
      const after = await ctx.admin.counters(db);
      const { r, db: d } = m;
      if (d.off > 0) throw new Error(`${d.off} steps were not due at the chosen instant`);
      const secs = msBetween(monoOf(m.clock, dueMs), BigInt(r.endNs)) / 1000;
      const note = r.capped
        ? `time cap: ${r.jobs} of ${n} done in ${secs.toFixed(1)} s`
        : undefined;
      ctx.results.add(row, 'cyclone', r.jobs / secs, note);
      // A worker that wakes at the due time starts the first step within milliseconds; a late
      // first start is the engine's wake-up missing the due time, and is in the figure.
      if (d.first > 50) {
        ctx.results.add(
          row,
          'cyclone',
          Number.NaN,
          `a repetition's first step started ${Math.round(d.first)} ms after the due time`,
        );
      }
      if (r.capped) ctx.results.markCapped(row, 'cyclone');
      const jobs = Math.max(1, r.jobs);
      ctx.results.work.push({
        row,
        system: 'cyclone',
        jobs: r.jobs,
        xactsPerJob: (after.commits + after.rollbacks - before.commits - before.rollbacks) / jobs,
        statementsPerJob: r.statements / jobs,
        rowsPerJob: (after.rowsWritten - before.rowsWritten) / jobs,
        pgCpuPer1k: (cpuDelta(m.cpu0, m.cpu1) / jobs) * 1000,
        workerCpuPer1k: (r.cpuMs / jobs) * 1000,
        rssMiB: r.rssMiB,
        top: r.top,
      });
      ctx.log(
        `  ${row} cyclone: ${Math.round(r.jobs / secs)} steps/s (${secs.toFixed(2)} s; worker ready ${Math.round(m.margin)} ms before the due time; by the database: first start +${d.first.toFixed(1)} ms, last completion's transaction +${(d.last / 1000).toFixed(2)} s)`,
      );
    } finally {
      child.kill();
    }
  });
}

/**
 * Row 10: an idle tuned worker child; `count` single-node runs submitted one by one (10 in
 * flight), each with its own `runAt`, spread at random over `spreadMs` starting a little after
 * the worker is ready (database clock). Once all have run, lateness is `started_at −
 * scheduled_at` of each step, both set by PostgreSQL (`scheduled_at` = the `runAt`; `started_at`
 * = `now()` of the claim that took it). Records p50 and p99 in ms.
 */
export async function timerLateness(
  ctx: BenchContext,
  rows: { p50: string; p99: string },
  count: number,
  spreadMs: number,
): Promise<void> {
  await withFreshDb(ctx, 'cyclone', (_db, url) =>
    withPool(url, async (pool) => {
      const leadMs = TIMER_LEAD_MS + 2 * count;
      const capMs = leadMs + spreadMs + 60_000;
      const child = new ChildWorker({
        system: 'cyclone',
        mode: 'drain',
        url,
        variant: 'tuned',
        workload: 'noop',
        expected: count,
        capMs,
      });
      const producer = new Client({ connectionString: url, poolSize: 10 });
      try {
        await child.waitFor('@READY', START_TIMEOUT_MS);
        const startMs = (await readDbClock(pool)).dbMs + leadMs;
        const times = Array.from(
          { length: count },
          () => new Date(startMs + Math.random() * spreadMs),
        );
        await mapLimit(times, 10, async (runAt) => {
          await producer.submit(noopFlow, {}, { runAt });
        });
        const submittedMs = (await readDbClock(pool)).dbMs;
        const r = JSON.parse(await child.waitFor('@DONE', capMs + START_TIMEOUT_MS)) as DrainResult;
        if (r.capped) throw new Error(`only ${r.jobs} of ${count} timers ran`);
        const { rows: steps } = await pool.query<{ ms: number; late: boolean; attempt: number }>(
          `SELECT (extract(epoch FROM started_at - scheduled_at) * 1000)::float8 AS ms,
                  scheduled_at <= created_at AS late, attempt
           FROM cyclone.cyclone_steps WHERE workflow = 'bench_noop'`,
        );
        const ms = steps.map((s) => s.ms);
        // A step submitted after its runAt is due at its insert (scheduled_at = now()): still a
        // pickup, but not a timer set in advance; said in the note when it happens.
        const late = steps.filter((s) => s.late).length;
        const retried = steps.filter((s) => s.attempt !== 1).length;
        if (retried > 0) throw new Error(`${retried} timers ran more than once`);
        const notes = [
          `${ms.length} timers, max ${Math.max(...ms).toFixed(1)} ms`,
          ...(late > 0 ? [`${late} submitted after their runAt`] : []),
          ...(submittedMs > startMs
            ? [`submits ended ${Math.round(submittedMs - startMs)} ms into the window`]
            : []),
        ].join(', ');
        ctx.results.add(rows.p50, 'cyclone', quantile(ms, 0.5), notes);
        ctx.results.add(rows.p99, 'cyclone', quantile(ms, 0.99), notes);
        ctx.log(
          `  10 cyclone: p50 ${quantile(ms, 0.5).toFixed(1)} ms, p99 ${quantile(ms, 0.99).toFixed(1)} ms (${notes})`,
        );
      } finally {
        await producer.close();
        await child.exit();
      }
    }),
  );
}

/**
 * Row 11's database: a clone of the template with `count` single-node runs submitted through
 * `submitMany` (1,000 per call, 2 calls in flight), each call with a `delayMs` between 1 h and
 * 25 h, so their steps are real `scheduled` steps spread over a day; then `VACUUM (ANALYZE)` and
 * `CHECKPOINT`, as for row 7's history.
 */
export async function futureBacklogDb(
  ctx: BenchContext,
  count: number,
): Promise<{ db: string; what: string; seconds: number }> {
  const db = await ctx.admin.createDb('future_cyclone', ctx.templates.get('cyclone'));
  const url = ctx.admin.url(db);
  const t = nowNs();
  const producer = new Client({ connectionString: url, poolSize: 2 });
  try {
    const parts = chunks(count, CHUNK);
    await mapLimit(parts, 2, async (k, i) => {
      const delayMs = BACKLOG_FROM_MS + Math.floor((i * BACKLOG_SPAN_MS) / parts.length);
      await producer.submitMany(
        noopFlow,
        Array.from({ length: k }, () => ({})),
        { delayMs },
      );
    });
  } finally {
    await producer.close();
  }
  const scheduled = await withPool(url, async (pool) => {
    await pool.query('VACUUM (ANALYZE)');
    await pool.query('CHECKPOINT');
    const { rows } = await pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM cyclone.cyclone_steps
       WHERE state = 'scheduled' AND scheduled_at > now() + interval '30 minutes'`,
    );
    return rows[0]?.n ?? 0;
  });
  if (scheduled !== count) throw new Error(`${scheduled} of ${count} steps are future-dated`);
  await ctx.admin.waitIdle(db);
  return {
    db,
    what: `${count.toLocaleString('en-US')} runs submitted with submitMany (delayMs 1–25 h), their steps \`scheduled\``,
    seconds: msBetween(t, nowNs()) / 1000,
  };
}

/**
 * Row 12: a worker child with concurrency 10 (`SIGNAL_CONCURRENCY`); `n` runs of `a → w → z`
 * submitted (`submitMany`), `w` waiting for the signal `go`. Once every run waits at `w` (all `a`
 * completed and every `w` parked until its deadline, an hour ahead: untimed), the harness sends
 * the `n` signals with `client.signal`, 10 in flight.
 * Timed from the first signal sent to the moment the worker knows the last `z` completed.
 * Records signals per second; row `12ok` records the fraction of runs completed (1 when a
 * waiting node holds no worker slot: 10 slots, `n` waiting runs), checked in the targets.
 */
export async function signalThroughput(ctx: BenchContext, row: string, n: number): Promise<void> {
  await withFreshDb(ctx, 'cyclone', (db, url) =>
    withPool(url, async (pool) => {
      const capMs = 600_000;
      const child = new ChildWorker({
        system: 'cyclone',
        mode: 'drain',
        url,
        variant: 'default',
        workload: 'noop',
        // a, w and z of every run.
        expected: 3 * n,
        capMs,
        cyclone: { waitFlow: true, concurrency: SIGNAL_CONCURRENCY },
      });
      const producer = new Client({ connectionString: url, poolSize: SIGNALS_IN_FLIGHT });
      try {
        await child.waitFor('@READY', START_TIMEOUT_MS);
        const runIds: string[] = [];
        for (const k of chunks(n, CHUNK)) {
          const r = await producer.submitMany(
            waitFlow,
            Array.from({ length: k }, () => ({})),
          );
          runIds.push(...r.runIds);
        }
        // Every run parked at its wait node (`scheduled`, due at its deadline), and nothing
        // running: no waiting node holds a slot.
        const deadline = Date.now() + 120_000;
        let state = { waiting: 0, running: 0 };
        for (;;) {
          const { rows } = await pool.query<{ waiting: number; running: number }>(
            `SELECT count(*) FILTER (WHERE node = 'w' AND state = 'scheduled'
                                       AND scheduled_at > now() + interval '30 minutes')::int
                      AS waiting,
                    count(*) FILTER (WHERE state = 'running')::int AS running
             FROM cyclone.cyclone_steps WHERE workflow = 'bench_wait'`,
          );
          state = rows[0] ?? state;
          if (state.waiting === n) break;
          if (Date.now() > deadline) {
            throw new Error(`only ${state.waiting} of ${n} runs reached their wait node in 120 s`);
          }
          await sleep(50);
        }
        // The window of the worker's statements and CPU, and of the server's CPU, starts here.
        child.send('MARK');
        await child.waitFor('@MARKED', START_TIMEOUT_MS);
        const cpu0 = await ctx.admin.backendCpu(db);
        const t = nowNs();
        await mapLimit(runIds, SIGNALS_IN_FLIGHT, async (id) => {
          const r = await producer.signal(id, WAIT_SIGNAL, { approved: true });
          if (!r.accepted) throw new Error(`signal to run ${id} not accepted`);
        });
        const sentSecs = msBetween(t, nowNs()) / 1000;
        const r = JSON.parse(await child.waitFor('@DONE', capMs + START_TIMEOUT_MS)) as DrainResult;
        const cpu1 = await ctx.admin.backendCpu(db);
        const { rows: done } = await pool.query<{ completed: number; delivered: number }>(
          `SELECT (SELECT count(*)::int FROM cyclone.cyclone_runs
                   WHERE workflow = 'bench_wait' AND state = 'completed') AS completed,
                  (SELECT count(*)::int FROM cyclone.cyclone_steps
                   WHERE workflow = 'bench_wait' AND node = 'w' AND output = '{"approved": true}')
                    AS delivered`,
        );
        const d = done[0] as { completed: number; delivered: number };
        ctx.results.add('12ok', 'cyclone', d.completed / n);
        if (r.capped || d.completed < n) {
          ctx.results.add(
            row,
            'cyclone',
            Number.NaN,
            `${d.completed} of ${n} runs completed (${r.jobs} of ${3 * n} steps)`,
          );
          ctx.log(`  ${row} cyclone: ${d.completed} of ${n} runs completed`);
          return;
        }
        if (d.delivered !== n) throw new Error(`${n - d.delivered} wait nodes missed their signal`);
        const secs = msBetween(t, BigInt(r.endNs)) / 1000;
        ctx.results.add(
          row,
          'cyclone',
          n / secs,
          `all ${n} runs waited at their wait node with ${state.running} steps running before the first signal`,
        );
        ctx.results.add(row, 'cyclone', Number.NaN, `signals alone: ${Math.round(n / sentSecs)}/s`);
        // Per signal (a run's `w` and `z`), from the first signal: the worker's statements and
        // CPU, and the CPU of every backend of the database (the producer's signals included).
        // Transactions and rows are not split at that instant (a backend reports them when it
        // exits), so they are left out.
        ctx.results.work.push({
          row,
          system: 'cyclone',
          jobs: n,
          xactsPerJob: Number.NaN,
          statementsPerJob: r.statements / n,
          rowsPerJob: Number.NaN,
          pgCpuPer1k: (cpuDelta(cpu0, cpu1) / n) * 1000,
          workerCpuPer1k: (r.cpuMs / n) * 1000,
          rssMiB: r.rssMiB,
          top: r.top,
        });
        ctx.log(
          `  ${row} cyclone: ${Math.round(n / secs)} signals/s end to end (${secs.toFixed(2)} s; sending ${sentSecs.toFixed(2)} s)`,
        );
      } finally {
        await producer.close();
        await child.exit();
      }
    }),
  );
}
