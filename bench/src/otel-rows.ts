/**
 * Row 13: what OpenTelemetry costs the worker (Cyclone only). Scenario 2 tuned (no-op runs,
 * `concurrency: 500`) with three worker children, alternating within one harness run:
 *
 * - 13b: the same harness, with `@cyclone/core` as it was before the instrumentation (the
 *   parent of the commit that added `packages/core/src/telemetry.ts`, or `BENCH_OTEL_BASELINE`);
 * - 13n: this build, no SDK registered (what every user without OpenTelemetry runs);
 * - 13s: this build with the SDK registered: every step span batched to an exporter that drops
 *   it, every metric aggregated (collected once a minute, so never within a run).
 *
 * 13r = 13n ÷ 13b is the cost of the instrumentation when unused (target ≥ 0.97); 13sr =
 * 13s ÷ 13n, its cost when used; 13c and 13sc, the same for the worker's CPU per run, which the
 * machine's load disturbs less than a rate. Each ratio is the median of the ratios within a
 * repetition. Larger N and more repetitions than row 2: the question is a few per cent, not a
 * factor.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { type BuildOptions, build } from 'esbuild';
import { BENCH_DIR } from './build-child.js';
import type { Column, RowDef } from './results.js';
import { type BenchContext, drain } from './scenarios.js';
import { median } from './util.js';

const ROOT = resolve(BENCH_DIR, '..');
const n = (x: number) => x.toLocaleString('en-US');

/** What row 13 reads of the mode (plan.ts's `Mode`, which imports this module). */
interface ModeName {
  name: 'quick' | 'full';
  /** `--reps`, or the mode's; row 13 takes at least 5 (quick) or 7 (full). */
  reps: number;
}

/** Runs per drain and repetitions of each child, by mode. */
function size(mode: ModeName): { runs: number; reps: number } {
  return mode.name === 'quick'
    ? { runs: 10_000, reps: Math.max(5, mode.reps) }
    : { runs: 20_000, reps: Math.max(7, mode.reps) };
}

/** The rows of row 13, for plan.ts. */
export function otelRows(mode: ModeName): RowDef[] {
  const { runs } = size(mode);
  const row = (id: string, title: string): RowDef => ({
    id,
    title,
    unit: 'runs/s',
    higherIsBetter: true,
    digits: 0,
  });
  const ratio = (id: string, title: string): RowDef => ({
    id,
    title,
    unit: '×',
    higherIsBetter: true,
    digits: 3,
  });
  const cpu = (id: string, title: string): RowDef => ({
    id,
    title,
    unit: '×',
    higherIsBetter: false,
    digits: 3,
  });
  return [
    row('13b', `13. process ${n(runs)} no-op runs, tuned: core before OpenTelemetry`),
    row('13n', `13. … this build, no OpenTelemetry SDK registered`),
    row('13s', `13. … this build, OpenTelemetry SDK registered (spans and metrics dropped)`),
    ratio('13r', '13. runs/s, no SDK ÷ before OpenTelemetry (target ≥ 0.97)'),
    ratio('13sr', '13. runs/s, SDK registered ÷ no SDK'),
    cpu('13c', '13. worker CPU per run, no SDK ÷ before OpenTelemetry'),
    cpu('13sc', '13. worker CPU per run, SDK registered ÷ no SDK'),
  ];
}

/** The commit whose core has no instrumentation: `BENCH_OTEL_BASELINE`, else telemetry.ts's parent. */
function baselineRef(): string {
  const named = process.env.BENCH_OTEL_BASELINE;
  if (named) return named;
  const added = execFileSync(
    'git',
    ['log', '--diff-filter=A', '--format=%H', '--', 'packages/core/src/telemetry.ts'],
    { cwd: ROOT },
  )
    .toString()
    .trim()
    .split('\n')
    .at(-1);
  if (!added)
    throw new Error('no commit adds packages/core/src/telemetry.ts: set BENCH_OTEL_BASELINE');
  return `${added}^`;
}

/** esbuild options of the worker child, as build-child.ts has them. */
const CHILD_OPTIONS: BuildOptions = {
  bundle: true,
  splitting: true,
  format: 'esm',
  platform: 'node',
  target: 'node20',
  outExtension: { '.js': '.mjs' },
  conditions: ['@cyclone/source'],
  external: ['pg', 'graphile-worker', 'pg-boss', 'zod'],
  logLevel: 'warning',
};

/**
 * The worker child bundled with `@cyclone/core`'s source at `ref` (extracted with `git archive`;
 * its dependencies resolve from the workspace's core).
 * @returns the child script and the commit it was built from.
 */
async function buildBaselineChild(ref: string): Promise<{ script: string; commit: string }> {
  const commit = execFileSync('git', ['rev-parse', '--short', ref], { cwd: ROOT })
    .toString()
    .trim();
  const src = mkdtempSync(join(tmpdir(), 'cyclone-bench-baseline-'));
  try {
    const tar = execFileSync('git', ['archive', commit, 'packages/core/src'], {
      cwd: ROOT,
      maxBuffer: 256 * 1024 * 1024,
    });
    execFileSync('tar', ['-x', '-C', src], { input: tar });
    const outdir = join(BENCH_DIR, 'node_modules/.cache/cyclone-bench-baseline');
    rmSync(outdir, { recursive: true, force: true });
    mkdirSync(outdir, { recursive: true });
    const entry = join(src, 'packages/core/src/index.ts');
    await build({
      ...CHILD_OPTIONS,
      entryPoints: [join(BENCH_DIR, 'src/child.ts')],
      outdir,
      nodePaths: [join(ROOT, 'packages/core/node_modules')],
      plugins: [
        {
          name: 'baseline-core',
          setup(b) {
            b.onResolve({ filter: /^@cyclone\/core$/ }, () => ({ path: entry }));
          },
        },
      ],
    });
    return { script: join(outdir, 'child.mjs'), commit };
  } finally {
    rmSync(src, { recursive: true, force: true });
  }
}

/**
 * The worker child of this build with the SDK registered first (otel-child.ts). OpenTelemetry's
 * packages stay external (CommonJS that requires Node's modules, which an ESM bundle cannot), so
 * the SDK and core share bench's `@opentelemetry/api`.
 */
async function buildSdkChild(): Promise<string> {
  const outdir = join(BENCH_DIR, 'node_modules/.cache/cyclone-bench-otel');
  rmSync(outdir, { recursive: true, force: true });
  await build({
    ...CHILD_OPTIONS,
    entryPoints: [join(BENCH_DIR, 'src/otel-child.ts')],
    outdir,
    external: [...(CHILD_OPTIONS.external ?? []), '@opentelemetry/*'],
  });
  return join(outdir, 'otel-child.mjs');
}

/**
 * Measures row 13 (see the module comment); `guard` records a failed measurement and goes on.
 * Needs Cyclone among the systems.
 */
export async function otelCost(
  ctx: BenchContext,
  mode: ModeName,
  guard: (row: string, col: Column, fn: () => Promise<void>) => Promise<void>,
): Promise<void> {
  for (const id of ['13b', '13n', '13s', '13r', '13sr', '13c', '13sc']) {
    ctx.results.text(id, 'graphile-worker', 'n/a: Cyclone only');
    ctx.results.text(id, 'pg-boss', 'n/a: Cyclone only');
  }
  const { runs, reps } = size(mode);
  const baseline = await buildBaselineChild(baselineRef());
  const sdk = await buildSdkChild();
  ctx.log(`  13: baseline core at ${baseline.commit}; ${reps} × 3 drains of ${n(runs)} runs`);
  const children: [string, string | undefined][] = [
    ['13b', baseline.script],
    ['13n', undefined],
    ['13s', sdk],
  ];
  // A 4× cap over row 2's: a larger N, and a slow baseline must not look capped.
  const capMs = ctx.drainCapMs * 4;
  // Per repetition, each child's rate and worker CPU per run: the ratios are taken within a
  // repetition (its three drains ran back to back), then their median, so that the machine's
  // load drifting between repetitions cancels out.
  const perRep: Record<string, { rate: number; cpu: number }>[] = [];
  for (let rep = 0; rep < reps; rep++) {
    const k = rep % children.length;
    const got: Record<string, { rate: number; cpu: number }> = {};
    for (const [row, childScript] of [...children.slice(k), ...children.slice(0, k)]) {
      await guard(row, 'cyclone', async () => {
        await drain(ctx, row, 'cyclone', 'tuned', 'noop', runs, { childScript, capMs });
        const rate = ctx.results.get(row, 'cyclone')?.values.at(-1);
        const cpu = ctx.results.work.at(-1)?.workerCpuPer1k;
        if (rate !== undefined && cpu !== undefined) got[row] = { rate, cpu: cpu / 1000 };
      });
    }
    perRep.push(got);
  }
  const ratio = (row: string, a: string, b: string, of: 'rate' | 'cpu') => {
    const values = perRep.flatMap((r) => {
      const x = r[a];
      const y = r[b];
      return x && y ? [x[of] / y[of]] : [];
    });
    ctx.results.add(row, 'cyclone', median(values), `median of ${values.length} paired ratios`);
  };
  ratio('13r', '13n', '13b', 'rate');
  ratio('13sr', '13s', '13n', 'rate');
  ratio('13c', '13n', '13b', 'cpu');
  ratio('13sc', '13s', '13n', 'cpu');
  ctx.results.add('13b', 'cyclone', Number.NaN, `core at ${baseline.commit}`);
}
