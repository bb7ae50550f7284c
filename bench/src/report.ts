/** Turns the results into the markdown report (stdout and bench/results/<date>-<mode>.md). */
import type { Mode } from './plan.js';
import type { Column, Results, RowDef, WorkSample } from './results.js';
import { SYSTEM_NAMES, type SystemInfo, type SystemName } from './systems/types.js';
import { median } from './util.js';

export interface ReportInput {
  mode: Mode;
  rows: RowDef[];
  results: Results;
  systems: SystemInfo[];
  startedAt: Date;
  seconds: number;
  machine: {
    cpus: number;
    loadStart: number[];
    loadEnd: number[];
    node: string;
    postgres: string;
    maxConnections: number;
    connectionsAtStart: number;
    pgStatStatements: boolean;
    baselineRssMiB: number;
  };
  history: Partial<Record<SystemName, { what: string; seconds: number }>>;
  /** Row 11's future-dated backlog, when it was made. */
  backlog?: { what: string; seconds: number } | undefined;
}

const PEERS: readonly SystemName[] = ['graphile-worker', 'pg-boss'];
const COLUMNS: readonly Column[] = [...SYSTEM_NAMES, 'pgbench'];

function fmt(v: number, digits: number): string {
  if (!Number.isFinite(v)) return '—';
  return v.toLocaleString('en-US', {
    minimumFractionDigits: digits,
    maximumFractionDigits: digits,
  });
}

function cellText(r: Results, row: RowDef, col: Column): string {
  const c = r.get(row.id, col);
  if (!c) return '';
  if (c.values.length === 0) return c.text ?? (c.notes.length ? '—' : '');
  const m = fmt(median(c.values), row.digits);
  if (c.values.length === 1) return m;
  const lo = fmt(Math.min(...c.values), row.digits);
  const hi = fmt(Math.max(...c.values), row.digits);
  return `${m} (${lo}–${hi})`;
}

function med(r: Results, row: string, col: Column): number {
  const c = r.get(row, col);
  return c?.values.length ? median(c.values) : Number.NaN;
}

/** Cyclone / best peer (highest when higher is better, lowest otherwise). */
function ratio(r: Results, row: RowDef): string {
  const cy = med(r, row.id, 'cyclone');
  const peers = PEERS.map((p) => med(r, row.id, p)).filter(Number.isFinite);
  if (!Number.isFinite(cy) || peers.length === 0) return '—';
  const best = row.higherIsBetter ? Math.max(...peers) : Math.min(...peers);
  if (best === 0) return '—';
  const x = cy / best;
  const good = row.higherIsBetter ? x >= 1 : x <= 1;
  return `${x.toFixed(2)}×${good ? '' : ' ▼'}`;
}

function table(head: string[], body: string[][]): string {
  const line = (cells: string[]) => `| ${cells.join(' | ')} |`;
  return [line(head), line(head.map(() => '---')), ...body.map(line)].join('\n');
}

function targets(r: Results): string[][] {
  const t: string[][] = [];
  let issue = '8';
  const check = (name: string, value: number, goal: number, atMost: boolean, how: string) => {
    const ok = Number.isFinite(value) ? (atMost ? value <= goal : value >= goal) : undefined;
    t.push([
      issue,
      name,
      Number.isFinite(value) ? value.toFixed(2) : '—',
      `${atMost ? '≤' : '≥'} ${goal}`,
      ok === undefined ? 'n/a' : ok ? 'met' : '**missed**',
      how,
    ]);
  };
  const gwTuned = med(r, '2t', 'graphile-worker');
  check(
    'no-op runs vs graphile-worker tuned',
    med(r, '2t', 'cyclone') / gwTuned,
    1,
    false,
    'row 2 tuned ÷ graphile-worker row 2 tuned',
  );
  check(
    '10-node DAG steps/s vs graphile-worker tuned jobs/s',
    med(r, '3', 'cyclone') / gwTuned,
    0.6,
    false,
    'row 3 ÷ graphile-worker row 2 tuned',
  );
  check(
    'completionTx steps/s vs pgbench floor',
    med(r, '4t', 'cyclone') / med(r, '4t', 'pgbench'),
    0.8,
    false,
    'row 4 tuned ÷ pgbench (claim + row + complete, 1 xact/job)',
  );
  check(
    'completionTx steps/s vs graphile-worker default',
    med(r, '4t', 'cyclone') / med(r, '4d', 'graphile-worker'),
    1.5,
    false,
    'row 4 tuned ÷ graphile-worker row 4 default',
  );
  check(
    'pickup p50 vs graphile-worker (ratio)',
    med(r, '5p50', 'cyclone') / med(r, '5p50', 'graphile-worker'),
    1,
    true,
    'row 5 p50 ÷ graphile-worker row 5 p50',
  );
  check(
    'recovery after SIGKILL with defaults (s)',
    med(r, '6d', 'cyclone'),
    10,
    true,
    'row 6 defaults',
  );
  check(
    'throughput with history vs empty',
    med(r, '7r', 'cyclone'),
    0.9,
    false,
    'row 7 ÷ row 2 tuned',
  );
  issue = '14';
  check(
    'steps due at one instant vs tuned no-op of the same N',
    med(r, '9r', 'cyclone'),
    0.8,
    false,
    'row 9 ÷ row 9 reference (medians)',
  );
  check('timer lateness p50 (ms)', med(r, '10p50', 'cyclone'), 50, true, 'row 10 p50');
  check('timer lateness p99 (ms)', med(r, '10p99', 'cyclone'), 200, true, 'row 10 p99');
  check(
    'throughput with future-dated steps vs empty',
    med(r, '11r', 'cyclone'),
    0.9,
    false,
    'row 11 ÷ row 11 empty-table reference (medians)',
  );
  issue = '16';
  check(
    'runs waiting for a signal hold no worker slot (runs completed, fraction)',
    Math.min(...(r.get('12ok', 'cyclone')?.values ?? [Number.NaN])),
    1,
    false,
    'row 12: runs completed ÷ runs, worst repetition, with worker concurrency 10',
  );
  return t;
}

function workTable(work: WorkSample[], rows: RowDef[]): string {
  const body: string[][] = [];
  for (const row of rows) {
    for (const sys of SYSTEM_NAMES) {
      const ws = work.filter((w) => w.row === row.id && w.system === sys);
      if (ws.length === 0) continue;
      const m = (f: (w: WorkSample) => number | undefined, d: number) => {
        const vals = ws.map(f).filter((v): v is number => v !== undefined && Number.isFinite(v));
        return vals.length ? fmt(median(vals), d) : '—';
      };
      body.push([
        row.id,
        sys,
        m((w) => w.jobs, 0),
        m((w) => w.xactsPerJob, 2),
        m((w) => w.statementsPerJob, 2),
        m((w) => w.rowsPerJob, 2),
        m((w) => w.pgCpuPer1k, 0),
        m((w) => w.workerCpuPer1k, 0),
        m((w) => w.rssMiB, 0),
      ]);
    }
  }
  return table(
    [
      'row',
      'system',
      'jobs',
      'xacts/job',
      'statements/job',
      'rows written/job',
      'PG CPU ms / 1k jobs',
      'worker CPU ms / 1k jobs',
      'peak RSS MiB',
    ],
    body,
  );
}

function statements(work: WorkSample[], rowIds: string[]): string {
  const out: string[] = [];
  for (const id of rowIds) {
    for (const sys of SYSTEM_NAMES) {
      const w = work.filter((x) => x.row === id && x.system === sys && x.top).at(-1);
      if (!w?.top || w.jobs === 0) continue;
      out.push(`**${id} ${sys}** (last repetition, ${w.jobs} jobs)\n`);
      out.push(
        table(
          ['calls/job', 'mean ms', 'statement (first 110 chars)'],
          w.top
            .slice(0, 8)
            .map((s) => [
              (s.calls / w.jobs).toFixed(3),
              (s.ms / s.calls).toFixed(2),
              `\`${s.sql.replaceAll('|', '\\|').replaceAll('`', "'")}\``,
            ]),
        ),
      );
      out.push('');
    }
  }
  return out.join('\n');
}

export function renderReport(input: ReportInput): string {
  const { mode, rows, results: r, machine: mc } = input;
  const load = (l: number[]) => l.map((x) => x.toFixed(2)).join(' / ');
  const out: string[] = [];
  out.push(`# Cyclone benchmark — ${mode.name} mode, ${input.startedAt.toISOString()}`);
  out.push('');
  out.push(
    `Machine: ${mc.cpus} CPUs, load average ${load(mc.loadStart)} at start and ${load(mc.loadEnd)} at end (1/5/15 min); ` +
      `PostgreSQL ${mc.postgres} (max_connections ${mc.maxConnections}; other client connections at start: ${mc.connectionsAtStart}); Node ${mc.node}. ` +
      `Took ${Math.round(input.seconds)} s. Cells: median (min–max) of ${mode.reps} repetition(s) per system ` +
      `(rows 5 and 10: ${mode.latencyReps}, rows 6 and 7: ${mode.slowReps}), systems alternating; rows 9–12 are Cyclone only. **Other work shares this machine and server, so the figures are noisy**; ` +
      'compare systems within one report, not across reports.',
  );
  out.push('');
  out.push('## Results');
  out.push('');
  out.push(
    table(
      [
        'scenario',
        'unit',
        'Cyclone',
        'graphile-worker',
        'pg-boss',
        'pgbench floor',
        'Cyclone / best peer',
      ],
      rows.map((row) => [
        row.title,
        row.higherIsBetter ? row.unit : `${row.unit} (lower is better)`,
        ...COLUMNS.map((c) => cellText(r, row, c)),
        ratio(r, row),
      ]),
    ),
  );
  out.push('');
  out.push(
    `▼ marks a row where Cyclone is behind the best peer. Row 8 for scale: a bare Node process that loads \`pg\` peaks at ${mc.baselineRssMiB.toFixed(0)} MiB.`,
  );
  const notes: string[] = [];
  for (const row of rows) {
    for (const c of COLUMNS) {
      const cell = r.get(row.id, c);
      if (cell?.notes.length) notes.push(`- ${row.id} ${c}: ${cell.notes.join('; ')}`);
    }
  }
  if (notes.length) {
    out.push('');
    out.push(...notes);
  }
  out.push('');
  out.push('## Targets (issues 8, 14 and 16)');
  out.push('');
  out.push(table(['issue', 'target', 'measured', 'goal', 'result', 'computed as'], targets(r)));
  out.push('');
  out.push('## Database work per job');
  out.push('');
  out.push(
    "xacts/job: commits + rollbacks in the run's database (pg_stat_database) over the worker's whole life, ÷ jobs. " +
      'statements/job: statements the worker process sent in the measured window (counted client-side on `pg.Client#query`, ' +
      `since pg_stat_statements is ${mc.pgStatStatements ? 'loaded but not used' : 'not loaded on this server'}). ` +
      'rows written/job: tup_inserted + tup_updated + tup_deleted ÷ jobs. PG CPU: utime + stime of the server backends ' +
      "connected to the run's database during the window (/proc). Medians over repetitions.",
  );
  out.push('');
  out.push(workTable(r.work, rows));
  out.push('');
  out.push('## Busiest statements');
  out.push('');
  out.push(statements(r.work, ['2t', '3', '4t', '7h', '9', '9n', '11', '11e', '12']));
  out.push('## Configurations and versions');
  out.push('');
  out.push(
    table(
      ['system', 'version', 'default', 'tuned', 'short (row 6)', 'defaults on a crash (row 6)'],
      input.systems.map((s) => [
        s.name,
        s.version,
        s.variants.default ?? '—',
        s.variants.tuned ?? '—',
        s.variants.short ?? s.missing?.short ?? '—',
        s.defaultRecovery,
      ]),
    ),
  );
  out.push('');
  out.push(
    `pgbench floor: \`pgbench -n -M prepared -c 10 -j 2\`, one transaction per job: \`SELECT … ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED\` on a partial index, [\`INSERT\` one row,] \`UPDATE … SET state = 'done'\`, COMMIT.`,
  );
  if (Object.keys(input.history).length > 0) {
    out.push('');
    out.push('History (row 7):');
  }
  for (const [sys, h] of Object.entries(input.history)) {
    out.push(`- ${sys}: ${h.what}; inserted and vacuumed in ${h.seconds.toFixed(1)} s`);
  }
  if (input.backlog) {
    out.push('');
    out.push(
      `Future-dated backlog (row 11): ${input.backlog.what}; submitted, vacuumed and analyzed in ${input.backlog.seconds.toFixed(1)} s.`,
    );
  }
  out.push('');
  return out.join('\n');
}
