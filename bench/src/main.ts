/**
 * `pnpm bench [--quick] [--reps N] [--only 1,2,5] [--systems cyclone,pg-boss]`
 *
 * Runs Cyclone, graphile-worker and pg-boss on the same PostgreSQL (DATABASE_URL, default
 * postgres://root@127.0.0.1:5432/test), each run in a fresh database created and dropped here,
 * systems alternating, and prints a markdown report that is also written to
 * bench/results/<date>-<mode>.md (<date>-<mode>-only-<rows>.md with --only). See bench/README.md.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { Admin } from './admin.js';
import { baselineRssMiB } from './build-child.js';
import { prepareChildren } from './child-process.js';
import {
  dueBurst,
  dueLeadMs,
  futureBacklogDb,
  signalThroughput,
  timerLateness,
} from './cyclone-scenarios.js';
import { fleetCost } from './fleet-rows.js';
import { flowControl } from './flow-rows.js';
import { otelCost } from './otel-rows.js';
import { FULL, type Mode, QUICK, rows } from './plan.js';
import { renderReport } from './report.js';
import { type Column, Results } from './results.js';
import {
  type BenchContext,
  drain,
  historyDb,
  kill,
  latency,
  makeTemplate,
  pgbench,
  submit,
} from './scenarios.js';
import { loadSystem } from './systems/index.js';
import { SYSTEM_NAMES, type System, type SystemName } from './systems/types.js';
import { uiRunsList } from './ui-rows.js';
import { errMessage, median } from './util.js';

const { values: args } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    reps: { type: 'string' },
    only: { type: 'string' },
    systems: { type: 'string' },
  },
});

const mode: Mode = { ...(args.quick ? QUICK : FULL) };
if (args.reps) mode.reps = mode.slowReps = mode.latencyReps = Math.max(1, Number(args.reps));
const only = args.only ? new Set(args.only.split(',').map((s) => s.trim())) : undefined;
const want = (scenario: number) => !only || only.has(String(scenario));
const chosen = (args.systems?.split(',').map((s) => s.trim()) ?? SYSTEM_NAMES) as SystemName[];
for (const s of chosen) {
  if (!SYSTEM_NAMES.includes(s)) throw new Error(`unknown system '${s}'`);
}

const baseUrl = process.env.DATABASE_URL ?? 'postgres://root@127.0.0.1:5432/test';
const admin = new Admin(baseUrl);
const results = new Results();
const log = (line: string) => process.stderr.write(`${line}\n`);
const t0 = Date.now();
/** Logs a section title with the seconds elapsed so far. */
const section = (title: string) => log(`[${((Date.now() - t0) / 1000).toFixed(0)} s] ${title}`);

const systems = new Map<SystemName, System>();
for (const name of chosen) {
  systems.set(name, await loadSystem(name));
}

/** The systems in a different order on each repetition (alternating runs). */
const order = (rep: number): SystemName[] => {
  const list = [...systems.keys()];
  const k = rep % list.length;
  return [...list.slice(k), ...list.slice(0, k)];
};
const has = (name: SystemName) => systems.has(name);

let interrupted = false;
process.on('SIGINT', () => {
  if (interrupted) process.exit(130);
  interrupted = true;
  log('interrupted: dropping the benchmark databases…');
  void admin.dropAll().finally(() => process.exit(130));
});

const startedAt = new Date();
const loadStart = loadavg();
await admin.connect();
const server = await admin.serverInfo();
const baselineRss = await baselineRssMiB();
const ctx: BenchContext = {
  admin,
  results,
  systems,
  templates: new Map(),
  drainCapMs: mode.drainCapMs,
  log,
};
const history: Partial<Record<SystemName, { what: string; seconds: number }>> = {};
/** Row 11's backlog, for the report. */
let backlog: { what: string; seconds: number } | undefined;

try {
  log(
    `cyclone bench, ${mode.name} mode: ${[...systems.keys()].join(', ')}; databases ${admin.prefix}_*`,
  );
  await prepareChildren();
  for (const name of systems.keys()) ctx.templates.set(name, await makeTemplate(ctx, name));

  /** Runs one measurement; a failure is logged and noted under the table, and the run goes on. */
  const guard = async (row: string, col: Column, fn: () => Promise<void>) => {
    try {
      await fn();
    } catch (err) {
      const msg = (errMessage(err).split('\n')[0] ?? '').slice(0, 200);
      log(`  ! ${row} ${col}: ${msg}`);
      results.add(row, col, Number.NaN, `failed: ${msg}`);
    }
  };
  /** Runs `fn` for every repetition × system, systems alternating. */
  const each = async (row: string, reps: number, fn: (name: SystemName) => Promise<void>) => {
    for (let rep = 0; rep < reps; rep++) {
      for (const name of order(rep)) await guard(row, name, () => fn(name));
    }
  };

  if (want(1)) {
    section('1. submit');
    await each('1', mode.reps, (s) => submit(ctx, '1', s, 'bulk', mode.submitN));
    await each('1b', mode.reps, (s) => submit(ctx, '1b', s, 'one', mode.submitN));
  }
  if (want(2) || want(8)) {
    section('2. no-op runs (8: peak RSS)');
    await each('2d', mode.reps, (s) =>
      drain(ctx, '2d', s, 'default', 'noop', mode.drainN, { rssRow: '8d' }),
    );
    await each('2t', mode.reps, (s) =>
      drain(ctx, '2t', s, 'tuned', 'noop', mode.drainN, { rssRow: '8t' }),
    );
    for (let rep = 0; rep < mode.reps; rep++) {
      await guard('2t', 'pgbench', () => pgbench(ctx, '2t', mode.drainN, false));
    }
  }
  if (want(3)) {
    section('3. 10-node DAG');
    await each('3', mode.reps, (s) => drain(ctx, '3', s, 'tuned', 'dag', mode.dagRuns));
  }
  if (want(4)) {
    section('4. one row written per step');
    await each('4d', mode.reps, (s) => drain(ctx, '4d', s, 'default', 'write', mode.writeN));
    await each('4t', mode.reps, (s) => drain(ctx, '4t', s, 'tuned', 'write', mode.writeN));
    for (let rep = 0; rep < mode.reps; rep++) {
      await guard('4t', 'pgbench', () => pgbench(ctx, '4t', mode.writeN, true));
    }
  }
  if (want(5)) {
    section('5. pickup latency');
    await each('5p50', mode.latencyReps, (s) =>
      latency(
        ctx,
        { p50: '5p50', p99: '5p99' },
        s,
        'default',
        mode.latencySamples,
        mode.latencyBudgetMs,
      ),
    );
    if (mode.latencyTuned) {
      await each('5tp50', mode.latencyReps, (s) =>
        latency(
          ctx,
          { p50: '5tp50', p99: '5tp99' },
          s,
          'tuned',
          mode.latencySamples,
          mode.latencyBudgetMs,
        ),
      );
    }
  }
  if (want(6)) {
    section('6. recovery after SIGKILL');
    for (const name of systems.keys()) {
      const info = (systems.get(name) as System).info();
      if (name !== 'cyclone') results.text('6d', name, `not measured (${boundOf(name)})`);
      if (!info.variants.short)
        results.text('6s', name, `n/a (${info.missing?.short ?? 'no short setting'})`);
    }
    for (let rep = 0; rep < mode.slowReps; rep++) {
      if (has('cyclone')) {
        await guard('6d', 'cyclone', () => kill(ctx, '6d', 'cyclone', 'default', 90_000));
      }
      for (const name of order(rep)) {
        if ((systems.get(name) as System).info().variants.short) {
          await guard('6s', name, () => kill(ctx, '6s', name, 'short', 60_000));
        }
      }
    }
  }
  if (want(7)) {
    section(`7. ${mode.historyN.toLocaleString('en-US')} finished runs in the tables`);
    const dbs = new Map<SystemName, string>();
    for (const name of systems.keys()) {
      await guard('7h', name, async () => {
        const h = await historyDb(ctx, name, mode.historyN);
        dbs.set(name, h.db);
        history[name] = { what: h.what, seconds: h.seconds };
        log(`  ${name}: ${h.what} (${h.seconds.toFixed(1)} s)`);
      });
    }
    await each('7h', mode.slowReps, async (s) => {
      const db = dbs.get(s);
      if (db) await drain(ctx, '7h', s, 'tuned', 'noop', mode.drainN, { db });
    });
    for (const db of dbs.values()) await admin.dropDb(db);
  }
  // Row 7 as a fraction of the empty-table figure.
  for (const name of systems.keys()) {
    const h = results.get('7h', name)?.values ?? [];
    const e = results.get('2t', name)?.values ?? [];
    if (h.length && e.length) results.add('7r', name, median(h) / median(e), 'ratio of medians');
  }
  await cycloneOnlyRows(guard);
  if (want(13)) {
    section('13. the cost of OpenTelemetry');
    if (has('cyclone')) await otelCost(ctx, mode, guard);
    else log('row 13 is Cyclone only: skipped (--systems has no cyclone)');
  }
  if (want(14) || want(15) || want(16)) {
    section(
      '14–16. flow control: a limit that holds nothing back, 100 keys at 1 each, 1,000 starts/s',
    );
    if (has('cyclone')) await flowControl(ctx, mode, guard);
    else log('rows 14–16 are Cyclone only: skipped (--systems has no cyclone)');
  }
  if (want(17)) {
    section('17. the UI runs list on 1,000,000 finished runs');
    if (has('cyclone')) await uiRunsList(ctx, mode, guard);
    else log('row 17 is Cyclone only: skipped (--systems has no cyclone)');
  }
  if (want(18)) {
    section('18. many workers: 50 workers against 5 on one backlog');
    if (has('cyclone')) await fleetCost(ctx, mode, guard);
    else log('row 18 is Cyclone only: skipped (--systems has no cyclone)');
  }
} finally {
  await admin.dropAll().catch(() => {});
}

const report = renderReport({
  mode,
  rows: rows(mode),
  results,
  systems: [...systems.values()].map((s) => s.info()),
  startedAt,
  seconds: (Date.now() - startedAt.getTime()) / 1000,
  machine: {
    cpus: cpus().length,
    loadStart,
    loadEnd: loadavg(),
    node: process.version,
    postgres: server.version,
    maxConnections: server.maxConnections,
    connectionsAtStart: server.connections - 1,
    pgStatStatements: server.pgStatStatements,
    baselineRssMiB: baselineRss,
  },
  history,
  backlog,
});
await admin.close();

process.stdout.write(`${report}\n`);
const dir = resolve(dirname(fileURLToPath(import.meta.url)), '../results');
mkdirSync(dir, { recursive: true });
// A run of some rows (`--only`) gets a name of its own, so it never replaces a whole run's file.
const part = args.only ? `-only-${[...(only ?? [])].join('-')}` : '';
const file = resolve(dir, `${startedAt.toISOString().slice(0, 10)}-${mode.name}${part}.md`);
writeFileSync(file, report);
log(`written to ${file}`);

/**
 * Rows 9–12 (cyclone-scenarios.ts): Cyclone only. Rows 9 and 11 are ratios to row 2's tuned
 * no-op scenario run again at the row's N, in a fresh empty database, alternating with the row's
 * own runs (9n, 11e): the same build, and the same load of this shared machine.
 */
async function cycloneOnlyRows(
  guard: (row: string, col: Column, fn: () => Promise<void>) => Promise<void>,
): Promise<void> {
  const wanted = [9, 10, 11, 12].filter(want);
  if (wanted.length === 0) return;
  const peerText: Record<string, Record<Exclude<SystemName, 'cyclone'>, string>> = {
    time: {
      'graphile-worker': 'not measured: Cyclone-only row (graphile-worker has runAt)',
      'pg-boss': 'not measured: Cyclone-only row (pg-boss has startAfter)',
    },
    signals: {
      'graphile-worker': 'n/a: no signals or wait nodes',
      'pg-boss': 'n/a: no signals or wait nodes',
    },
  };
  const rowsOf: Record<number, { ids: string[]; kind: 'time' | 'signals' }> = {
    9: { ids: ['9'], kind: 'time' },
    10: { ids: ['10p50', '10p99'], kind: 'time' },
    11: { ids: ['11'], kind: 'time' },
    12: { ids: ['12'], kind: 'signals' },
  };
  for (const k of wanted) {
    const { ids, kind } = rowsOf[k] as { ids: string[]; kind: 'time' | 'signals' };
    for (const id of ids) {
      for (const [peer, text] of Object.entries(peerText[kind] ?? {})) {
        results.text(id, peer as SystemName, text);
      }
    }
  }
  if (!has('cyclone')) {
    log(`rows ${wanted.join(', ')} are Cyclone only: skipped (--systems has no cyclone)`);
    return;
  }
  const n = (x: number) => x.toLocaleString('en-US');
  if (want(9)) {
    section(`9. ${n(mode.dueN)} steps due at one instant, and the same N available at once`);
    // At least 1,000 steps/s before the cap.
    const capMs = Math.max(mode.drainCapMs, mode.dueN);
    for (let rep = 0; rep < mode.reps; rep++) {
      const burst = () => guard('9', 'cyclone', () => dueBurst(ctx, '9', mode.dueN, capMs));
      const reference = () =>
        guard('9n', 'cyclone', () =>
          drain(ctx, '9n', 'cyclone', 'tuned', 'noop', mode.dueN, {
            capMs,
            settleMs: dueLeadMs(mode.dueN),
          }),
        );
      if (rep % 2 === 0) {
        await reference();
        await burst();
      } else {
        await burst();
        await reference();
      }
    }
    const b = results.get('9', 'cyclone')?.values ?? [];
    const ref = results.get('9n', 'cyclone')?.values ?? [];
    if (b.length && ref.length) {
      results.add('9r', 'cyclone', median(b) / median(ref), 'ratio of medians');
    }
  }
  if (want(10)) {
    section(`10. lateness of ${n(mode.timerN)} timers over ${mode.timerSpreadMs / 1000} s`);
    for (let rep = 0; rep < mode.latencyReps; rep++) {
      await guard('10p50', 'cyclone', () =>
        timerLateness(ctx, { p50: '10p50', p99: '10p99' }, mode.timerN, mode.timerSpreadMs),
      );
    }
  }
  if (want(11)) {
    section(`11. ${n(mode.backlogN)} future-dated steps in the table`);
    let db: string | undefined;
    await guard('11', 'cyclone', async () => {
      const b = await futureBacklogDb(ctx, mode.backlogN);
      db = b.db;
      backlog = { what: b.what, seconds: b.seconds };
      log(`  cyclone: ${b.what} (${b.seconds.toFixed(1)} s)`);
    });
    if (db) {
      const at = db;
      for (let rep = 0; rep < mode.reps; rep++) {
        const full = () =>
          guard('11', 'cyclone', () =>
            drain(ctx, '11', 'cyclone', 'tuned', 'noop', mode.backlogDrainN, { db: at }),
          );
        const empty = () =>
          guard('11e', 'cyclone', () =>
            drain(ctx, '11e', 'cyclone', 'tuned', 'noop', mode.backlogDrainN),
          );
        if (rep % 2 === 0) {
          await empty();
          await full();
        } else {
          await full();
          await empty();
        }
      }
      await admin.dropDb(at);
    }
    const f = results.get('11', 'cyclone')?.values ?? [];
    const e = results.get('11e', 'cyclone')?.values ?? [];
    if (f.length && e.length) {
      results.add('11r', 'cyclone', median(f) / median(e), 'ratio of medians');
    }
  }
  if (want(12)) {
    section(`12. ${n(mode.signalRuns)} runs waiting for a signal`);
    for (let rep = 0; rep < mode.reps; rep++) {
      await guard('12', 'cyclone', () => signalThroughput(ctx, '12', mode.signalRuns));
    }
  }
}

/** The documented bound of a peer's default recovery, short. */
function boundOf(name: SystemName): string {
  return name === 'graphile-worker' ? '≥ 4 h: lock expiry' : '≥ 15 min: expireIn';
}
