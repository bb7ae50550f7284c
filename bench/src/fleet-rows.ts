/**
 * Row 18: many workers on one backlog (Cyclone only). The same no-op backlog, all due at one
 * instant (as row 9), drained by two fleets of the same total concurrency (500), alternating:
 *
 * - 18f: 50 workers, 10 processes × 5 workers, concurrency 10 each;
 * - 18b: 5 workers, 5 processes × 1 worker, concurrency 100 each.
 *
 * Every process has one `Client` on a pool of 5 connections shared by its workers (a caller-given
 * pool: the workers' claims, completion batches, heartbeats and sweeps all go through it), and
 * LISTEN off, polling every 100 ms (a backlog that is due keeps every claim loop busy; 50 LISTEN
 * connections would be half of this server's `max_connections`). So both fleets run the same code path, and only the
 * number of claimers differs. **18r** = 18f ÷ 18b (target ≥ 0.8: claim contention must not
 * collapse as a fleet grows); **18fc** and **18bc**: client connections to the database at the end of
 * the drain ÷ workers.
 *
 * The backlog is submitted an hour ahead; once every worker is ready (10 processes start over
 * seconds on a loaded machine) one UPDATE makes it due, and the workers (polling every 100 ms)
 * find it. Timed by the database: from the first claim (`min(started_at)`) to the last
 * completion's transaction (`max(completed_at)`), so that no process's clock is in the figure.
 * The harness polls the running runs (an index scan of `cyclone_runs (state, …)`) every 100 ms
 * meanwhile, and with them what the busy backends wait on (`pg_stat_activity`), logged as the
 * mean count per poll by wait event. On a server with `pg_stat_statements` loaded (a throwaway
 * cluster, `DATABASE_URL`), it is reset when the backlog becomes due and the log gives each
 * fleet's statements by server time per run (planning time too when
 * `pg_stat_statements.track_planning` is on), rows per call and buffers per run. With
 * `BENCH_18_CPU_PROF=<dir>`, each fleet's first process runs with `--cpu-prof` into
 * `<dir>/18f` or `<dir>/18b`.
 */
import { Client } from '@cyclone/core';
import type pg from 'pg';
import { cpuDelta } from './admin.js';
import { ChildWorker } from './child-process.js';
import type { DrainResult } from './protocol.js';
import type { Column, RowDef } from './results.js';
import { type BenchContext, START_TIMEOUT_MS, withFreshDb, withPool } from './scenarios.js';
import { noopFlow } from './systems/cyclone.js';
import { chunks, median, sleep } from './util.js';

const n = (x: number) => x.toLocaleString('en-US');

/** One fleet's shape. */
interface Fleet {
  id: '18f' | '18b';
  processes: number;
  workersPerProcess: number;
  concurrency: number;
}

const FLEETS: readonly Fleet[] = [
  { id: '18f', processes: 10, workersPerProcess: 5, concurrency: 10 },
  { id: '18b', processes: 5, workersPerProcess: 1, concurrency: 100 },
];

/** Poll interval of every worker: LISTEN is off, and an idle worker sees the backlog this soon. */
const POLL_MS = 100;

/** Connections of each process's pool, shared by its workers. */
const POOL_PER_PROCESS = 5;

/** What row 18 reads of the mode. */
interface ModeSize {
  name: 'quick' | 'full';
  reps: number;
}

/** Runs per drain. */
const runsOf = (mode: ModeSize) => (mode.name === 'quick' ? 5_000 : 50_000);

/** The rows of row 18, for plan.ts. */
export function fleetRows(mode: ModeSize): RowDef[] {
  const runs = n(runsOf(mode));
  return [
    {
      id: '18f',
      title: `18. ${runs} no-op runs due at once, 50 workers (10 processes × 5 workers, concurrency 10)`,
      unit: 'runs/s',
      higherIsBetter: true,
      digits: 0,
    },
    {
      id: '18b',
      title: `18. … 5 workers (5 processes × 1 worker, concurrency 100)`,
      unit: 'runs/s',
      higherIsBetter: true,
      digits: 0,
    },
    {
      id: '18r',
      title: '18. 50 workers ÷ 5 workers (target ≥ 0.8)',
      unit: '×',
      higherIsBetter: true,
      digits: 2,
    },
    {
      id: '18fc',
      title: '18. connections per worker, 50 workers',
      unit: 'connections',
      higherIsBetter: false,
      digits: 2,
    },
    {
      id: '18bc',
      title: '18. connections per worker, 5 workers',
      unit: 'connections',
      higherIsBetter: false,
      digits: 2,
    },
  ];
}

/** The backlog is submitted this far ahead, then made due at once when every worker is ready. */
const HELD_MS = 3_600_000;

/** One drain of `runs` by `fleet`; records runs/s and connections per worker. */
async function drainFleet(ctx: BenchContext, fleet: Fleet, runs: number): Promise<void> {
  await withFreshDb(ctx, 'cyclone', async (db, url) => {
    const producer = new Client({ connectionString: url, poolSize: 1 });
    try {
      const runAt = new Date(Date.now() + HELD_MS);
      for (const k of chunks(runs, 1_000)) {
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
    const workers = fleet.processes * fleet.workersPerProcess;
    // A measurement aid: BENCH_18_CPU_PROF=<dir> profiles each fleet's first process.
    const profDir = process.env.BENCH_18_CPU_PROF;
    const children = Array.from(
      { length: fleet.processes },
      (_, i) =>
        new ChildWorker(
          {
            system: 'cyclone',
            mode: 'drain',
            url,
            variant: 'tuned',
            workload: 'noop',
            // Never reached by one process: the harness ends the drain with STOP.
            expected: runs + 1,
            capMs: 900_000,
            untilStop: true,
            cyclone: {
              concurrency: fleet.concurrency,
              workers: fleet.workersPerProcess,
              sharedPoolSize: POOL_PER_PROCESS,
              listen: false,
              pollIntervalMs: POLL_MS,
            },
          },
          undefined,
          profDir && i === 0
            ? ['--cpu-prof', `--cpu-prof-dir=${profDir}/${fleet.id}`, '--cpu-prof-interval=200']
            : [],
        ),
    );
    try {
      await Promise.all(children.map((c) => c.waitFor('@READY', START_TIMEOUT_MS)));
      const m = await withPool(url, async (pool) => {
        // Every worker is up (their start-ups, 10 processes on a loaded machine, are spread over
        // seconds): the backlog becomes due now, in one statement.
        await pool.query(
          `UPDATE cyclone.cyclone_steps SET scheduled_at = now()
           WHERE workflow = 'bench_noop' AND state = 'scheduled'`,
        );
        const pss = await statStatements(pool);
        const cpu0 = await ctx.admin.backendCpu(db);
        let connections = 0;
        // What the busy backends wait on, sampled at every poll: lock and LWLock waits show
        // claim contention that CPU figures alone do not.
        const waits = new Map<string, number>();
        let samples = 0;
        const deadline = Date.now() + 600_000;
        for (;;) {
          const { rows } = await pool.query<{ left: number; conns: number; waits: string[] }>(
            `SELECT (SELECT count(*) FROM cyclone.cyclone_runs WHERE state = 'running')::int AS left,
                    (SELECT count(*) FROM pg_stat_activity
                     WHERE datname = current_database() AND backend_type = 'client backend'
                       AND pid <> pg_backend_pid())::int AS conns,
                    (SELECT coalesce(array_agg(coalesce(wait_event_type || ':' || wait_event, 'CPU')), '{}')
                     FROM pg_stat_activity
                     WHERE datname = current_database() AND backend_type = 'client backend'
                       AND pid <> pg_backend_pid() AND state = 'active') AS waits`,
          );
          const r = rows[0] as { left: number; conns: number; waits: string[] };
          connections = Math.max(connections, r.conns);
          samples++;
          for (const w of r.waits) waits.set(w, (waits.get(w) ?? 0) + 1);
          if (r.left === 0) break;
          if (Date.now() > deadline) throw new Error(`${r.left} runs left after 600 s`);
          await sleep(100);
        }
        const cpu1 = await ctx.admin.backendCpu(db);
        const server = pss ? await serverStatements(pool) : undefined;
        const { rows } = await pool.query<{ last: number; done: number }>(
          `SELECT (extract(epoch FROM max(completed_at) - min(started_at)) * 1000)::float8 AS last,
                  count(*)::int AS done
           FROM cyclone.cyclone_steps WHERE workflow = 'bench_noop' AND state = 'completed'`,
        );
        return {
          connections,
          waits: [...waits]
            .sort((a, b) => b[1] - a[1])
            .map(([w, k]) => `${w} ${(k / Math.max(1, samples)).toFixed(1)}`)
            .join(', '),
          server,
          pgCpuMs: cpuDelta(cpu0, cpu1),
          ...(rows[0] as { last: number; done: number }),
        };
      });
      for (const c of children) c.send('STOP');
      const done = await Promise.all(
        children.map(async (c) => JSON.parse(await c.waitFor('@DONE', 60_000)) as DrainResult),
      );
      await Promise.all(children.map((c) => c.exit(2_000)));
      await ctx.admin.waitIdle(db);
      const after = await ctx.admin.counters(db);
      const secs = m.last / 1000;
      ctx.results.add(fleet.id, 'cyclone', m.done / secs);
      ctx.results.add(`${fleet.id}c` as '18fc' | '18bc', 'cyclone', m.connections / workers);
      const cpuMs = done.reduce((a, r) => a + r.cpuMs, 0);
      const statements = done.reduce((a, r) => a + r.statements, 0);
      const jobs = Math.max(1, m.done);
      ctx.results.work.push({
        row: fleet.id,
        system: 'cyclone',
        jobs: m.done,
        xactsPerJob: (after.commits + after.rollbacks - before.commits - before.rollbacks) / jobs,
        rowsPerJob: (after.rowsWritten - before.rowsWritten) / jobs,
        statementsPerJob: statements / jobs,
        pgCpuPer1k: (m.pgCpuMs / jobs) * 1000,
        workerCpuPer1k: (cpuMs / jobs) * 1000,
        rssMiB: Math.max(...done.map((r) => r.rssMiB)),
      });
      ctx.log(
        `  ${fleet.id} cyclone: ${Math.round(m.done / secs)} runs/s (${secs.toFixed(2)} s), ${m.connections} connections for ${workers} workers, worker CPU ${((cpuMs / jobs) * 1000).toFixed(0)} µs/run, ${(statements / jobs).toFixed(2)} statements/run: ${topStatements(done, jobs)}`,
      );
      ctx.log(`  ${fleet.id} busy backends by wait (mean per poll): ${m.waits || 'none'}`);
      if (m.server) {
        ctx.log(
          `  ${fleet.id} server time per run (pg_stat_statements): ${m.server
            .slice(0, 6)
            .map(
              (r) =>
                `${((r.ms * 1000) / jobs).toFixed(1)} µs (plan ${((r.plan_ms * 1000) / jobs).toFixed(1)}) in ${(r.calls / jobs).toFixed(3)} × ${r.query.slice(0, 50)} (${r.rows / Math.max(1, r.calls) >= 1 ? `${(r.rows / r.calls).toFixed(1)} rows, ` : ''}${(r.blks / jobs).toFixed(1)} blks/run)`,
            )
            .join('; ')}`,
        );
      }
    } finally {
      for (const c of children) c.kill();
    }
  });
}

/**
 * The busiest statements of a fleet, summed over its processes: calls per run, the text's start
 * and the mean time from send to result (client-side, so the wait for a connection is not in it).
 */
function topStatements(done: readonly DrainResult[], jobs: number): string {
  const sum = new Map<string, { calls: number; ms: number }>();
  for (const r of done) {
    for (const s of r.top) {
      const t = sum.get(s.sql) ?? { calls: 0, ms: 0 };
      t.calls += s.calls;
      t.ms += s.ms;
      sum.set(s.sql, t);
    }
  }
  return [...sum]
    .sort((a, b) => b[1].calls - a[1].calls)
    .slice(0, 8)
    .map(
      ([sql, t]) =>
        `${(t.calls / jobs).toFixed(3)} × ${sql.slice(0, 40)} (${(t.ms / t.calls).toFixed(1)} ms)`,
    )
    .join('; ');
}

/** True when the server has pg_stat_statements loaded (then reset for this database). */
async function statStatements(pool: pg.Pool): Promise<boolean> {
  const { rows } = await pool.query<{ ok: boolean }>(
    `SELECT current_setting('shared_preload_libraries') LIKE '%pg_stat_statements%' AS ok`,
  );
  if (!rows[0]?.ok) return false;
  await pool.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
  await pool.query('SELECT pg_stat_statements_reset()');
  return true;
}

/** One statement's server figures over the drain (pg_stat_statements). */
interface ServerStatement {
  query: string;
  calls: number;
  ms: number;
  /** Planning time; 0 unless `pg_stat_statements.track_planning` is on. */
  plan_ms: number;
  rows: number;
  blks: number;
}

/** This database's statements by server time, the harness's own polls left out. */
async function serverStatements(pool: pg.Pool): Promise<ServerStatement[]> {
  const { rows } = await pool.query<ServerStatement>(
    `SELECT regexp_replace(query, '\\s+', ' ', 'g') AS query, calls::int AS calls,
            total_exec_time AS ms, total_plan_time AS plan_ms, rows::int AS rows,
            (shared_blks_hit + shared_blks_read + shared_blks_dirtied + shared_blks_written)::int AS blks
     FROM pg_stat_statements
     WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
       AND query NOT LIKE '%pg_stat_statements%' AND query NOT LIKE '%pg_stat_activity%'
     ORDER BY total_exec_time DESC`,
  );
  return rows;
}

/** Row 18: the two fleets alternating, `reps` times each (at least 2). */
export async function fleetCost(
  ctx: BenchContext,
  mode: ModeSize,
  guard: (row: string, col: Column, fn: () => Promise<void>) => Promise<void>,
): Promise<void> {
  const runs = runsOf(mode);
  const reps = Math.max(2, mode.reps);
  for (let rep = 0; rep < reps; rep++) {
    const order = rep % 2 === 0 ? FLEETS : [...FLEETS].reverse();
    for (const fleet of order) await guard(fleet.id, 'cyclone', () => drainFleet(ctx, fleet, runs));
  }
  const f = ctx.results.get('18f', 'cyclone')?.values ?? [];
  const b = ctx.results.get('18b', 'cyclone')?.values ?? [];
  const ok = (v: number[]) => v.filter((x) => Number.isFinite(x));
  if (ok(f).length && ok(b).length) {
    ctx.results.add('18r', 'cyclone', median(ok(f)) / median(ok(b)), 'ratio of medians');
  }
}
