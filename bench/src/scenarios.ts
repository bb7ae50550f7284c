/**
 * The measurements. Each run gets a fresh database cloned from its system's migrated template
 * (scenario 7 shares one database with a large history per system), enqueues its jobs through
 * the system's producer, and runs the worker in a child process (child.ts).
 */
import { execFile } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { type Admin, cpuDelta } from './admin.js';
import { ChildWorker } from './child-process.js';
import type { DrainResult } from './protocol.js';
import type { Results } from './results.js';
import {
  BENCH_TABLES_SQL,
  JOBS_PER_UNIT,
  type System,
  type SystemName,
  type Variant,
  type Workload,
} from './systems/types.js';
import { mapLimit, msBetween, nowNs, quantile, sleep } from './util.js';

/** Submits before a timed submit run. */
const WARM_UP = 50;

/** How long a child may take to start and pick its first job. */
export const START_TIMEOUT_MS = 60_000;

export interface BenchContext {
  admin: Admin;
  results: Results;
  systems: Map<SystemName, System>;
  /** Migrated template database of each system. */
  templates: Map<SystemName, string>;
  /** A drain gives up (and reports the rate so far) after this long. */
  drainCapMs: number;
  log: (line: string) => void;
}

/** Creates each system's template: its schema plus the harness's tables. */
export async function makeTemplate(ctx: BenchContext, name: SystemName): Promise<string> {
  const db = await ctx.admin.createDb(`tpl_${name}`);
  const url = ctx.admin.url(db);
  await (ctx.systems.get(name) as System).install(url);
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    await c.query(BENCH_TABLES_SQL);
  } finally {
    await c.end();
  }
  await ctx.admin.waitIdle(db);
  return db;
}

export async function withPool<T>(url: string, fn: (pool: pg.Pool) => Promise<T>): Promise<T> {
  const pool = new pg.Pool({ connectionString: url, max: 1 });
  // pool.end() resolves before its connections have closed, so a database dropped WITH (FORCE)
  // right after may terminate one: the idle connection then emits 'error' on the pool, which,
  // unhandled, would end the harness. A connection lost otherwise fails the next query.
  pool.on('error', () => {});
  try {
    return await fn(pool);
  } finally {
    await pool.end();
  }
}

/** A fresh database for one run of `name`, dropped after `fn`. */
export async function withFreshDb<T>(
  ctx: BenchContext,
  name: SystemName,
  fn: (db: string, url: string) => Promise<T>,
): Promise<T> {
  const db = await ctx.admin.createDb(name.replace('-', ''), ctx.templates.get(name));
  try {
    return await fn(db, ctx.admin.url(db));
  } finally {
    await ctx.admin.dropDb(db);
  }
}

/**
 * Scenario 1: enqueue `n` no-op jobs, timed. `bulk`: the fastest public path (see
 * `Producer.bulk`); `one`: the single-job API with 10 calls in flight.
 */
export async function submit(
  ctx: BenchContext,
  row: string,
  name: SystemName,
  how: 'bulk' | 'one',
  n: number,
): Promise<void> {
  await withFreshDb(ctx, name, async (db, url) => {
    const before = await ctx.admin.counters(db);
    const p = await (ctx.systems.get(name) as System).producer(url, 'default');
    let secs: number;
    try {
      // Warm-up: open the producer's connections, warm the code paths.
      await mapLimit(Array.from({ length: WARM_UP }), 10, () => p.one('noop', {}));
      const t = nowNs();
      if (how === 'bulk') await p.bulk('noop', n);
      else await mapLimit(Array.from({ length: n }), 10, () => p.one('noop', {}));
      secs = msBetween(t, nowNs()) / 1000;
    } finally {
      await p.close();
    }
    await ctx.admin.waitIdle(db);
    const after = await ctx.admin.counters(db);
    ctx.results.add(row, name, n / secs);
    ctx.results.work.push({
      row,
      system: name,
      jobs: n + WARM_UP,
      xactsPerJob:
        (after.commits + after.rollbacks - before.commits - before.rollbacks) / (n + WARM_UP),
      rowsPerJob: (after.rowsWritten - before.rowsWritten) / (n + WARM_UP),
    });
    ctx.log(`  ${row} ${name} ${how}: ${Math.round(n / secs)} runs/s`);
  });
}

export interface DrainOptions {
  /** Database to use instead of a fresh one (scenario 7's history); left in place. */
  db?: string;
  /** Record the worker's peak RSS under this row too (scenario 8). */
  rssRow?: string;
  /** Time cap instead of the mode's `drainCapMs` (row 9's larger N). */
  capMs?: number;
  /**
   * Wait this long after the insert before the worker starts (row 9's reference: as long as row 9
   * waits for its due time, so both start on a table that settled as long after its insert).
   */
  settleMs?: number;
  /** The worker child's script instead of this build's (row 13: another core, or an SDK). */
  childScript?: string;
}

/**
 * Scenarios 2, 3, 4, 7: enqueue `units` of `workload` (untimed), then start a worker child and
 * time first handler start → last completion committed. Records jobs (steps) per second.
 */
export async function drain(
  ctx: BenchContext,
  row: string,
  name: SystemName,
  variant: Variant,
  workload: Workload,
  units: number,
  options: DrainOptions = {},
): Promise<void> {
  // A run that hit the time cap is not repeated: its figure is a bound, and the cap costs time.
  if (ctx.results.get(row, name)?.capped) return;
  const capMs = options.capMs ?? ctx.drainCapMs;
  const sys = ctx.systems.get(name) as System;
  const run = async (db: string, url: string) => {
    const idFloor = sys.idFloor
      ? await withPool(url, async (pool) => (await sys.idFloor?.(pool)) ?? '0')
      : undefined;
    const p = await sys.producer(url, variant);
    try {
      await p.bulk(workload, units);
    } finally {
      await p.close();
    }
    await ctx.admin.waitIdle(db);
    if (options.settleMs) await sleep(options.settleMs);
    const before = await ctx.admin.counters(db);
    const expected = units * JOBS_PER_UNIT[workload];
    const child = new ChildWorker(
      {
        system: name,
        mode: 'drain',
        url,
        variant,
        workload,
        expected,
        capMs,
        idFloor,
      },
      options.childScript,
    );
    try {
      await child.waitFor('@T0', START_TIMEOUT_MS);
      const cpu0 = await ctx.admin.backendCpu(db);
      const r = JSON.parse(await child.waitFor('@DONE', capMs + START_TIMEOUT_MS)) as DrainResult;
      const cpu1 = await ctx.admin.backendCpu(db);
      await child.exit();
      await ctx.admin.waitIdle(db);
      const after = await ctx.admin.counters(db);
      const rate = r.jobs / (r.ms / 1000);
      const note = r.capped
        ? `time cap: ${r.jobs} of ${expected} done in ${(r.ms / 1000).toFixed(1)} s`
        : undefined;
      ctx.results.add(row, name, rate, note);
      if (r.capped) ctx.results.markCapped(row, name);
      if (options.rssRow) ctx.results.add(options.rssRow, name, r.rssMiB);
      const jobs = Math.max(1, r.jobs);
      ctx.results.work.push({
        row,
        system: name,
        jobs: r.jobs,
        xactsPerJob: (after.commits + after.rollbacks - before.commits - before.rollbacks) / jobs,
        statementsPerJob: r.statements / jobs,
        rowsPerJob: (after.rowsWritten - before.rowsWritten) / jobs,
        pgCpuPer1k: (cpuDelta(cpu0, cpu1) / jobs) * 1000,
        workerCpuPer1k: (r.cpuMs / jobs) * 1000,
        rssMiB: r.rssMiB,
        top: r.top,
      });
      ctx.log(
        `  ${row} ${name} ${variant} ${workload}: ${Math.round(rate)}/s${r.capped ? ' (capped)' : ''}`,
      );
    } finally {
      child.kill();
    }
  };
  if (options.db) await run(options.db, ctx.admin.url(options.db));
  else await withFreshDb(ctx, name, run);
}

/**
 * Scenario 5: an idle worker child; the harness (another process) enqueues one job at a time
 * with its CLOCK_MONOTONIC time in the payload and waits for the handler to report, then pauses
 * 5–30 ms (plus a random part of the poll interval for a system that only polls). Records p50
 * and p99 in ms.
 */
export async function latency(
  ctx: BenchContext,
  rows: { p50: string; p99: string },
  name: SystemName,
  variant: Variant,
  maxSamples: number,
  budgetMs: number,
): Promise<void> {
  const sys = ctx.systems.get(name) as System;
  await withFreshDb(ctx, name, async (_db, url) => {
    const child = new ChildWorker({
      system: name,
      mode: 'latency',
      url,
      variant,
      workload: 'noop',
      expected: 0,
      capMs: 0,
    });
    const p = await sys.producer(url, variant);
    try {
      await child.waitFor('@READY', START_TIMEOUT_MS);
      const one = async () => {
        const got = child.waitFor('@LAT', 30_000);
        await p.one('noop', { t: String(nowNs()) });
        return Number(await got) / 1e6;
      };
      await one(); // warm-up
      const samples: number[] = [];
      const start = Date.now();
      const jitter = sys.info().pollOnlyMs?.[variant] ?? 0;
      while (samples.length < maxSamples && Date.now() - start < budgetMs) {
        await sleep(5 + Math.random() * 25 + Math.random() * jitter);
        samples.push(await one());
      }
      const note = `${samples.length} samples`;
      ctx.results.add(rows.p50, name, quantile(samples, 0.5), note);
      ctx.results.add(rows.p99, name, quantile(samples, 0.99), note);
      ctx.log(
        `  5 ${name} ${variant}: p50 ${quantile(samples, 0.5).toFixed(2)} ms, p99 ${quantile(samples, 0.99).toFixed(2)} ms (${samples.length})`,
      );
    } finally {
      await p.close();
      await child.exit();
    }
  });
}

/**
 * Scenario 6: a victim worker child claims a job whose handler hangs; a second worker child
 * starts; the victim is SIGKILLed. Records the seconds from the kill to the handler starting on
 * the second worker.
 */
export async function kill(
  ctx: BenchContext,
  row: string,
  name: SystemName,
  variant: Variant,
  timeoutMs: number,
): Promise<void> {
  const sys = ctx.systems.get(name) as System;
  await withFreshDb(ctx, name, async (_db, url) => {
    const base = { system: name, url, variant, workload: 'noop' as const, expected: 0, capMs: 0 };
    const victim = new ChildWorker({ ...base, mode: 'victim' });
    let rescuer: ChildWorker | undefined;
    try {
      await victim.waitFor('@READY', START_TIMEOUT_MS);
      const p = await sys.producer(url, variant);
      try {
        await p.one('noop', {});
      } finally {
        await p.close();
      }
      await victim.waitFor('@STARTED', 30_000);
      rescuer = new ChildWorker({ ...base, mode: 'rescuer' });
      await rescuer.waitFor('@READY', START_TIMEOUT_MS);
      victim.kill();
      const killedAt = nowNs();
      await victim.exited;
      let recovered: bigint;
      try {
        recovered = BigInt(await rescuer.waitFor('@RECOVERED', timeoutMs));
      } catch {
        ctx.results.add(row, name, Number.NaN, `not recovered within ${timeoutMs / 1000} s`);
        ctx.log(`  6 ${name} ${variant}: not recovered within ${timeoutMs / 1000} s`);
        return;
      }
      const secs = msBetween(killedAt, recovered) / 1000;
      ctx.results.add(row, name, secs);
      ctx.log(`  6 ${name} ${variant}: ${secs.toFixed(2)} s`);
    } finally {
      victim.kill();
      await rescuer?.exit();
    }
  });
}

/** Scenario 7's database: a clone of the template with `count` finished jobs, vacuumed. */
export async function historyDb(
  ctx: BenchContext,
  name: SystemName,
  count: number,
): Promise<{ db: string; what: string; seconds: number }> {
  const db = await ctx.admin.createDb(`hist_${name}`, ctx.templates.get(name));
  const t = nowNs();
  const what = await withPool(ctx.admin.url(db), async (pool) => {
    const w = await (ctx.systems.get(name) as System).insertHistory(pool, count);
    // Steady state: autovacuum would have visited a table this size (hint bits, statistics),
    // and a checkpoint would have written the setup's pages long ago. Without the CHECKPOINT the
    // timed run shares the disk with the checkpointer flushing ~0.5 GB of freshly written
    // history, and pays the full-page images of every page it first touches after it.
    await pool.query('VACUUM (ANALYZE)');
    await pool.query('CHECKPOINT');
    return w;
  });
  await ctx.admin.waitIdle(db);
  return { db, what, seconds: msBetween(t, nowNs()) / 1000 };
}

const exec = promisify(execFile);

/**
 * The pgbench floor (a reference, not a peer): one transaction per job that claims it with
 * `FOR UPDATE SKIP LOCKED`, optionally writes a row, and marks it done; 10 clients, 2 threads,
 * prepared statements. Records transactions (= jobs) per second.
 */
export async function pgbench(
  ctx: BenchContext,
  row: string,
  n: number,
  writeRow: boolean,
): Promise<void> {
  const db = await ctx.admin.createDb('pgbench');
  try {
    const url = ctx.admin.url(db);
    await withPool(url, async (pool) => {
      await pool.query(`
        CREATE TABLE jobs (id bigserial PRIMARY KEY, state text NOT NULL DEFAULT 'available',
                           payload jsonb NOT NULL DEFAULT '{}') WITH (fillfactor = 80);
        CREATE INDEX jobs_available ON jobs (id) WHERE state = 'available';
        ${BENCH_TABLES_SQL}`);
      await pool.query('INSERT INTO jobs (payload) SELECT $2::jsonb FROM generate_series(1, $1)', [
        n,
        '{}',
      ]);
      await pool.query('VACUUM (ANALYZE)');
    });
    await ctx.admin.waitIdle(db);
    const script = join(tmpdir(), `${ctx.admin.prefix}_${writeRow ? 'write' : 'noop'}.sql`);
    writeFileSync(
      script,
      [
        'BEGIN;',
        "SELECT id FROM jobs WHERE state = 'available' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED \\gset",
        ...(writeRow ? ['INSERT INTO bench_rows (k) VALUES (:id);'] : []),
        "UPDATE jobs SET state = 'done' WHERE id = :id;",
        'COMMIT;',
        '',
      ].join('\n'),
    );
    const clients = 10;
    const { stdout } = await exec('pgbench', [
      '-n',
      '-M',
      'prepared',
      '-c',
      String(clients),
      '-j',
      '2',
      '-t',
      String(Math.floor(n / clients)),
      '-f',
      script,
      url,
    ]);
    const m = /tps = ([\d.]+) \(without initial connection time\)/.exec(stdout);
    const tps = m ? Number(m[1]) : Number.NaN;
    ctx.results.add(row, 'pgbench', tps);
    ctx.log(`  ${row} pgbench${writeRow ? ' +row' : ''}: ${Math.round(tps)} tps`);
  } finally {
    await ctx.admin.dropDb(db);
  }
}
