/**
 * Rows 14–16: flow control (Cyclone only; docs/flow-control.md), each with the tuned worker of
 * row 2 (concurrency 500) in a child process, as row 2's drain:
 *
 * - **14l**: no-op runs whose action has a concurrency limit of 100,000, above the worker's
 *   concurrency, so the limit never holds a step back and what is measured is the limited
 *   claim's cost; **14u** the same N unlimited (row 2 tuned), alternating; **14r** = 14l ÷ 14u
 *   (target ≥ 0.9).
 * - **15**: no-op runs of an action allowed 1 at a time per key, 100 keys (run i has key
 *   `k<i mod 100>`, so every key has a backlog to the end): steps/s; **15g**: the longest wait of
 *   any key between two of its starts while it had a backlog (ms, by `started_at`), how fair the
 *   round-robin over keys is.
 * - **16**: no-op runs of an action rate-limited to 1,000 starts per second: the starts in each
 *   whole second after the first (whose window starts empty, so its 1,000 start at once) and
 *   before the last, averaged, by the steps' `started_at` (the admission instant, the
 *   database's clock); target ≥ 950. Admissions come in bursts as the window frees whole
 *   batches at once, so a rate over the span from a burst to the last one would overstate it.
 */
import type { Column, RowDef } from './results.js';
import { type BenchContext, drain, withFreshDb, withPool } from './scenarios.js';
import { median } from './util.js';

const n = (x: number) => x.toLocaleString('en-US');

/** What rows 14–16 read of the mode. */
interface ModeSize {
  name: 'quick' | 'full';
  reps: number;
  drainN: number;
}

/** Row 16's runs: 5 s (quick) or 20 s at the limit. */
const rateRunsOf = (mode: ModeSize) => (mode.name === 'quick' ? 5_000 : 20_000);
/** Row 15's runs: 50 (quick) or 200 per key. */
const keyedRunsOf = (mode: ModeSize) => (mode.name === 'quick' ? 5_000 : 20_000);

/** The rows of rows 14–16, for plan.ts. */
export function flowRows(mode: ModeSize): RowDef[] {
  return [
    {
      id: '14l',
      title: `14. ${n(mode.drainN)} no-op runs, tuned, their action with a concurrency limit of 100,000 (above the worker's 500)`,
      unit: 'runs/s',
      higherIsBetter: true,
      digits: 0,
    },
    {
      id: '14u',
      title: '14. … reference: the same without a limit (row 2 tuned, alternating with 14l)',
      unit: 'runs/s',
      higherIsBetter: true,
      digits: 0,
    },
    {
      id: '14r',
      title: '14. … limited as a fraction of unlimited',
      unit: '×',
      higherIsBetter: true,
      digits: 2,
    },
    {
      id: '15',
      title: `15. ${n(keyedRunsOf(mode))} no-op runs over 100 keys, 1 at a time per key, tuned`,
      unit: 'steps/s',
      higherIsBetter: true,
      digits: 0,
    },
    {
      id: '15g',
      title: '15. … the longest wait of a key with a backlog between two of its starts',
      unit: 'ms',
      higherIsBetter: false,
      digits: 0,
    },
    {
      id: '16',
      title: `16. ${n(rateRunsOf(mode))} no-op runs rate-limited to 1,000 starts/s, tuned: starts per whole second after the first`,
      unit: 'starts/s',
      higherIsBetter: true,
      digits: 0,
    },
  ];
}

/** Rows 14–16; see the module comment. */
export async function flowControl(
  ctx: BenchContext,
  mode: ModeSize,
  guard: (row: string, col: Column, fn: () => Promise<void>) => Promise<void>,
): Promise<void> {
  const reps = Math.max(2, mode.reps);
  for (let rep = 0; rep < reps; rep++) {
    const limited = () =>
      guard('14l', 'cyclone', () => drain(ctx, '14l', 'cyclone', 'tuned', 'limited', mode.drainN));
    const plain = () =>
      guard('14u', 'cyclone', () => drain(ctx, '14u', 'cyclone', 'tuned', 'noop', mode.drainN));
    if (rep % 2 === 0) {
      await plain();
      await limited();
    } else {
      await limited();
      await plain();
    }
  }
  const l = ctx.results.get('14l', 'cyclone')?.values ?? [];
  const u = ctx.results.get('14u', 'cyclone')?.values ?? [];
  if (l.length && u.length)
    ctx.results.add('14r', 'cyclone', median(l) / median(u), 'ratio of medians');

  for (let rep = 0; rep < mode.reps; rep++) {
    await guard('15', 'cyclone', () =>
      withFreshDb(ctx, 'cyclone', async (db) => {
        // At least 2 ms a step before the cap: 100 keys at a time, each step a claim round apart.
        await drain(ctx, '15', 'cyclone', 'tuned', 'keyed', keyedRunsOf(mode), {
          db,
          capMs: Math.max(ctx.drainCapMs, keyedRunsOf(mode) * 2),
        });
        const gap = await withPool(ctx.admin.url(db), async (pool) => {
          // Per key, the gaps between consecutive starts; a key's last start ends its backlog.
          const { rows } = await pool.query<{ gap: number }>(
            `SELECT coalesce(max(g), 0)::float8 AS gap FROM (
               SELECT extract(epoch FROM started_at - lag(started_at)
                        OVER (PARTITION BY concurrency_key ORDER BY started_at)) * 1000 AS g
               FROM cyclone.cyclone_steps WHERE workflow = 'bench_keyed') x`,
          );
          return Number(rows[0]?.gap ?? 0);
        });
        ctx.results.add('15g', 'cyclone', gap);
        ctx.log(`  15g cyclone: longest wait of a key between two starts ${Math.round(gap)} ms`);
      }),
    );
  }

  for (let rep = 0; rep < mode.reps; rep++) {
    await guard('16', 'cyclone', () =>
      withFreshDb(ctx, 'cyclone', async (db) => {
        // The drain's own figure (runs/s) is not the row's: the rate is read from the admissions.
        await drain(ctx, '16drain', 'cyclone', 'tuned', 'rate', rateRunsOf(mode), {
          db,
          capMs: rateRunsOf(mode) * 2 + 10_000,
        });
        const rate = await withPool(ctx.admin.url(db), async (pool) => {
          // Starts in each whole second after the first (the first window starts empty, so
          // its 1,000 start at once) and before the last, which the drain may end partway.
          const { rows } = await pool.query<{ rate: number | null }>(
            `WITH s AS (SELECT started_at FROM cyclone.cyclone_steps WHERE workflow = 'bench_rate'),
                  t AS (SELECT min(started_at) AS t0,
                               floor(extract(epoch FROM max(started_at) - min(started_at)))::int AS k
                        FROM s),
                  w AS (SELECT g AS i, (SELECT count(*) FROM s, t
                          WHERE s.started_at >= t.t0 + make_interval(secs => g)
                            AND s.started_at < t.t0 + make_interval(secs => g + 1)) AS n
                        FROM t, generate_series(1, t.k - 1) g)
             SELECT avg(n)::float8 AS rate FROM w`,
          );
          return rows[0]?.rate ?? Number.NaN;
        });
        ctx.results.add('16', 'cyclone', rate);
        ctx.log(`  16 cyclone: ${Math.round(rate)} starts per whole second after the first`);
      }),
    );
  }
}
