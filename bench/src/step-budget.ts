/**
 * `pnpm --filter @cyclone/bench budget [options]`: the per-step budget of one drain, measured in
 * CPU time rather than wall-clock time, so that it holds on a machine other work shares.
 *
 * For each repetition: a fresh database from the system's migrated template, N units of the
 * workload submitted (untimed), then a worker child drains them (the same child and variants as
 * rows 2 and 4). Reported per step, over the child's measured window (first handler start → last
 * completion committed): the child's CPU (`process.cpuUsage`), the CPU of the server backends
 * connected to the database (/proc, 10 ms ticks), statements sent (counted in the child), and,
 * when the server has `pg_stat_statements` loaded, each statement's calls, server time and
 * buffers per step (`pg_stat_statements_reset()` before the child starts, so only the worker's
 * statements and the producer's none are counted). The child's peak RSS (`maxRSS` at the end of
 * the drain, MiB) is printed with each drain.
 *
 * Options: `--system cyclone|graphile-worker|pg-boss` (default cyclone), `--workload
 * noop|write|dag` (default noop), `--variant tuned|default` (default tuned), `--n 20000`,
 * `--reps 3`, `--child a.mjs,b.mjs` (bundled children to alternate, e.g. two worktrees' builds:
 * an A/B of CPU per step; default this build's), `--cpu-prof DIR` (the child runs with
 * `--cpu-prof`; the profile's samples inside the measured window are summarised: top functions
 * by self time). Environment: `DATABASE_URL` as for the bench.
 */
import { mkdirSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { Admin, cpuDelta } from './admin.js';
import { ChildWorker, prepareChildren } from './child-process.js';
import type { DrainResult } from './protocol.js';
import { Results } from './results.js';
import { type BenchContext, makeTemplate, START_TIMEOUT_MS, withPool } from './scenarios.js';
import { loadSystem } from './systems/index.js';
import { JOBS_PER_UNIT, type SystemName, type Variant, type Workload } from './systems/types.js';
import { median } from './util.js';

const { values: args } = parseArgs({
  options: {
    system: { type: 'string', default: 'cyclone' },
    workload: { type: 'string', default: 'noop' },
    variant: { type: 'string', default: 'tuned' },
    n: { type: 'string', default: '20000' },
    reps: { type: 'string', default: '3' },
    child: { type: 'string' },
    'cpu-prof': { type: 'string' },
  },
});

const name = args.system as SystemName;
const workload = args.workload as Workload;
const variant = args.variant as Variant;
const units = Number(args.n);
const reps = Number(args.reps);
const log = (line: string) => process.stderr.write(`${line}\n`);

const admin = new Admin(process.env.DATABASE_URL ?? 'postgres://root@127.0.0.1:5432/test');
await admin.connect();
const system = await loadSystem(name);
const ctx: BenchContext = {
  admin,
  results: new Results(),
  systems: new Map([[name, system]]),
  templates: new Map(),
  drainCapMs: 600_000,
  log,
};

/** One statement's server-side figures from pg_stat_statements, summed over the window. */
interface ServerStatement {
  query: string;
  calls: number;
  ms: number;
  rows: number;
  blks: number;
}

/** One drain's figures. */
interface Sample {
  child: string;
  steps: number;
  workerUs: number;
  serverUs: number;
  statements: number;
  stepsPerS: number;
  /** The child's peak RSS at the end of the drain (`maxRSS`), MiB. */
  rssMiB: number;
  server: ServerStatement[] | undefined;
  top: string[];
}

async function statStatements(pool: pg.Pool): Promise<boolean> {
  const { rows } = await pool.query<{ ok: boolean }>(
    `SELECT current_setting('shared_preload_libraries') LIKE '%pg_stat_statements%' AS ok`,
  );
  if (!rows[0]?.ok) return false;
  await pool.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
  return true;
}

/** Self time (µs) by function of the profile's samples within [fromUs, toUs] (monotonic µs). */
function profileTop(file: string, fromUs: number, toUs: number, topN = 25): string[] {
  const prof = JSON.parse(readFileSync(file, 'utf8')) as {
    nodes: { id: number; callFrame: { functionName: string; url: string; lineNumber: number } }[];
    samples: number[];
    timeDeltas: number[];
    startTime: number;
  };
  const byId = new Map(prof.nodes.map((n) => [n.id, n]));
  const self = new Map<string, number>();
  let t = prof.startTime;
  let total = 0;
  for (let i = 0; i < prof.samples.length; i++) {
    const dt = prof.timeDeltas[i] ?? 0;
    t += dt;
    if (t < fromUs || t > toUs) continue;
    const n = byId.get(prof.samples[i] as number);
    if (!n) continue;
    const f = n.callFrame;
    if (f.functionName === '(idle)') continue;
    const where = f.url ? `${f.url.replace(/^.*\/(node_modules\/)?/, '')}:${f.lineNumber + 1}` : '';
    const key = `${f.functionName || '(anonymous)'} ${where}`.trim();
    const next = prof.timeDeltas[i + 1] ?? dt;
    self.set(key, (self.get(key) ?? 0) + next);
    total += next;
  }
  return [...self.entries()]
    .sort((a, b) => b[1] - a[1])
    .slice(0, topN)
    .map(([k, us]) => `${((us / total) * 100).toFixed(1).padStart(5)} %  ${k}`);
}

async function once(template: string, script: string | undefined): Promise<Sample> {
  const db = await admin.createDb(`budget_${name.replace('-', '')}`, template);
  try {
    const url = admin.url(db);
    const idFloor = system.idFloor
      ? await withPool(url, async (pool) => (await system.idFloor?.(pool)) ?? '0')
      : undefined;
    const p = await system.producer(url, variant);
    try {
      await p.bulk(workload, units);
    } finally {
      await p.close();
    }
    await admin.waitIdle(db);
    const pool = new pg.Pool({ connectionString: url, max: 1 });
    pool.on('error', () => {});
    try {
      await pool.query('VACUUM (ANALYZE)');
      const pss = await statStatements(pool);
      if (pss) await pool.query('SELECT pg_stat_statements_reset()');
      const profDir = args['cpu-prof'];
      if (profDir) mkdirSync(profDir, { recursive: true });
      const before = profDir ? new Set(readdirSync(profDir)) : new Set<string>();
      const expected = units * JOBS_PER_UNIT[workload];
      const child = new ChildWorker(
        { system: name, mode: 'drain', url, variant, workload, expected, capMs: 600_000, idFloor },
        script,
        profDir ? ['--cpu-prof', `--cpu-prof-dir=${profDir}`, '--cpu-prof-interval=200'] : [],
      );
      let r: DrainResult;
      let serverMs: number;
      try {
        await child.waitFor('@T0', START_TIMEOUT_MS);
        const cpu0 = await admin.backendCpu(db);
        r = JSON.parse(await child.waitFor('@DONE', 600_000)) as DrainResult;
        const cpu1 = await admin.backendCpu(db);
        serverMs = cpuDelta(cpu0, cpu1);
        // CPU by backend, named by the last statement each ran: the worker's two pools apart.
        const { rows: last } = await pool.query<{ pid: number; q: string }>(
          `SELECT pid, left(regexp_replace(query, '\\s+', ' ', 'g'), 50) AS q FROM pg_stat_activity
           WHERE datname = current_database() AND pid <> pg_backend_pid()`,
        );
        for (const { pid, q } of last) {
          const ms = (cpu1.get(pid) ?? 0) - (cpu0.get(pid) ?? 0);
          log(`  backend ${pid}: ${ms} ms CPU, last: ${q}`);
        }
        await child.exit();
      } finally {
        child.kill();
      }
      let server: ServerStatement[] | undefined;
      if (pss) {
        const { rows } = await pool.query<ServerStatement>(
          `SELECT regexp_replace(query, '\\s+', ' ', 'g') AS query, calls::int AS calls,
                  total_exec_time AS ms, rows::int AS rows,
                  (shared_blks_hit + shared_blks_read + shared_blks_dirtied + shared_blks_written)::int AS blks
           FROM pg_stat_statements
           WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
             AND query NOT LIKE '%pg_stat_statements%'
           ORDER BY total_exec_time DESC`,
        );
        server = rows;
        if (rows.length === 0) log('pg_stat_statements: no rows for this database');
      }
      let top: string[] = [];
      if (profDir) {
        await admin.waitIdle(db);
        const fresh = readdirSync(profDir).filter(
          (f) => !before.has(f) && f.endsWith('.cpuprofile'),
        );
        const file = fresh[0];
        if (file) {
          const endUs = Number(BigInt(r.endNs) / 1000n);
          top = profileTop(join(profDir, file), endUs - r.ms * 1000, endUs);
        }
      }
      const steps = Math.max(1, r.jobs);
      return {
        child: script ?? 'this build',
        steps,
        workerUs: (r.cpuMs * 1000) / steps,
        serverUs: (serverMs * 1000) / steps,
        statements: r.statements / steps,
        stepsPerS: steps / (r.ms / 1000),
        rssMiB: r.rssMiB,
        server,
        top,
      };
    } finally {
      await pool.end();
    }
  } finally {
    await admin.waitIdle(db).catch(() => {});
    await admin.dropDb(db);
  }
}

try {
  await prepareChildren();
  const template = await makeTemplate(ctx, name);
  const scripts = args.child ? args.child.split(',') : [undefined];
  const samples = new Map<string, Sample[]>();
  for (let rep = 0; rep < reps; rep++) {
    // Alternating, in a rotated order: the machine's load drifts between repetitions.
    const order = scripts.map((_, i) => scripts[(i + rep) % scripts.length]);
    for (const script of order) {
      const s = await once(template, script);
      log(
        `${name} ${workload} ${variant} ${s.child}: worker ${s.workerUs.toFixed(1)} µs/step, server ${s.serverUs.toFixed(1)} µs/step, ${s.statements.toFixed(3)} statements/step, ${Math.round(s.stepsPerS)} steps/s, peak RSS ${s.rssMiB.toFixed(1)} MiB`,
      );
      samples.set(s.child, [...(samples.get(s.child) ?? []), s]);
    }
  }
  const out: string[] = [];
  for (const [child, list] of samples) {
    const m = (f: (s: Sample) => number) => median(list.map(f));
    out.push(
      `## ${name} · ${workload} · ${variant} · ${child} (${list.length} × ${list[0]?.steps} steps)`,
      '',
      `worker CPU ${m((s) => s.workerUs).toFixed(1)} µs/step (${list.map((s) => s.workerUs.toFixed(1)).join(', ')}); ` +
        `server backends CPU ${m((s) => s.serverUs).toFixed(1)} µs/step (${list.map((s) => s.serverUs.toFixed(1)).join(', ')}); ` +
        `${m((s) => s.statements).toFixed(3)} statements/step; ${Math.round(m((s) => s.stepsPerS))} steps/s; ` +
        `peak RSS ${m((s) => s.rssMiB).toFixed(1)} MiB (${list.map((s) => s.rssMiB.toFixed(1)).join(', ')})`,
      '',
    );
    const last = list[list.length - 1];
    if (last?.server) {
      out.push(
        '| calls/step | server µs/step | µs/call | rows/call | buffers/call | statement |',
        '| --- | --- | --- | --- | --- | --- |',
      );
      for (const st of last.server.slice(0, 12)) {
        out.push(
          `| ${(st.calls / last.steps).toFixed(3)} | ${((st.ms * 1000) / last.steps).toFixed(1)} | ${((st.ms * 1000) / Math.max(1, st.calls)).toFixed(0)} | ${(st.rows / Math.max(1, st.calls)).toFixed(1)} | ${(st.blks / Math.max(1, st.calls)).toFixed(1)} | \`${st.query.slice(0, 90)}\` |`,
        );
      }
      const total = last.server.reduce((a, s) => a + s.ms, 0);
      out.push(
        '',
        `server execution time, all statements: ${((total * 1000) / last.steps).toFixed(1)} µs/step`,
        '',
      );
    }
    if (last?.top.length) out.push('```', ...last.top, '```', '');
  }
  process.stdout.write(`${out.join('\n')}\n`);
} finally {
  await admin.dropAll();
  await admin.close();
}
