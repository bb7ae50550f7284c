/**
 * Row 17: the operator UI's runs list on a large history (Cyclone only). A fresh database is
 * seeded with 1,000,000 finished runs (one step each, the plan test's seeding:
 * packages/core/test/support/seed-history.ts) and a small live set, then the UI's reader
 * (`createUiReader` of `@cyclone/core/internal`, its own pool of 3, each read a read-only
 * transaction with a statement timeout) pages the runs list the way the page does: the newest
 * page and the next older one, for each filter the page offers (none, a state, a workflow, a
 * state and a workflow, a time window), 50 runs a page. **17** is the p95 of one page's read in
 * ms (target ≤ 50), **17p50** its median. Timed in this process, around the reader's call
 * (connection checkout, BEGIN, the statement, COMMIT, the rows mapped).
 */
import { createUiReader, type UiRunsFilter } from '@cyclone/core/internal';
import pg from 'pg';
import { seedHistory } from '../../packages/core/test/support/seed-history.js';
import type { Column, RowDef } from './results.js';
import { type BenchContext, withFreshDb } from './scenarios.js';
import { msBetween, nowNs, quantile } from './util.js';

const RUNS = 1_000_000;

/** What row 17 reads of the mode. */
interface ModeSize {
  name: 'quick' | 'full';
}

/** Page reads measured (after 20 unmeasured, which warm the caches and the pool). */
const readsOf = (mode: ModeSize) => (mode.name === 'quick' ? 300 : 2_000);

/** The filters the runs page offers, as the UI sends them. */
const FILTERS: readonly UiRunsFilter[] = [
  {},
  { state: 'failed' },
  { state: 'running' },
  { state: 'completed' },
  { workflow: 'wf_3' },
  { state: 'failed', workflow: 'wf_0' },
  { from: '2026-01-01T10:00:00Z', to: '2026-01-01T12:00:00Z' },
];

/** Row 17's definitions. */
export function uiRows(): RowDef[] {
  return [
    {
      id: '17',
      title: '17. UI runs list on 1,000,000 finished runs: one page (50 runs), p95',
      unit: 'ms',
      higherIsBetter: false,
      digits: 1,
    },
    {
      id: '17p50',
      title: '17. … median',
      unit: 'ms',
      higherIsBetter: false,
      digits: 1,
    },
  ];
}

/** Row 17: seeds the history once, then times the reader's runs pages. */
export async function uiRunsList(
  ctx: BenchContext,
  mode: ModeSize,
  guard: (row: string, col: Column, fn: () => Promise<void>) => Promise<void>,
): Promise<void> {
  await guard('17', 'cyclone', () =>
    withFreshDb(ctx, 'cyclone', async (_db, url) => {
      const t0 = nowNs();
      const pool = new pg.Pool({ connectionString: url, max: 1 });
      pool.on('error', () => {});
      try {
        await seedHistory(pool, { runs: RUNS });
      } finally {
        await pool.end();
      }
      ctx.log(
        `  17: seeded ${RUNS.toLocaleString('en-US')} runs in ${(msBetween(t0, nowNs()) / 1000).toFixed(1)} s`,
      );
      const reader = createUiReader({ connectionString: url });
      const ms: number[] = [];
      try {
        const total = readsOf(mode) + 20;
        for (let i = 0; i < total; i++) {
          const filter = FILTERS[i % FILTERS.length] as UiRunsFilter;
          // Every other read is the next older page of the filter, as "older" asks for it.
          const first = await reader.listRuns({ ...filter, limit: 50 });
          const older = i % 2 === 1 && first.next !== null;
          const start = nowNs();
          if (older) {
            await reader.listRuns({ ...filter, limit: 50, cursor: first.next as string });
          } else {
            await reader.listRuns({ ...filter, limit: 50 });
          }
          if (i >= 20) ms.push(msBetween(start, nowNs()));
        }
      } finally {
        await reader.close();
      }
      const note = `${ms.length} page reads over ${FILTERS.length} filters`;
      ctx.results.add('17', 'cyclone', quantile(ms, 0.95), note);
      ctx.results.add('17p50', 'cyclone', quantile(ms, 0.5), note);
      ctx.log(
        `  17 cyclone: p95 ${quantile(ms, 0.95).toFixed(1)} ms, median ${quantile(ms, 0.5).toFixed(1)} ms (${note})`,
      );
    }),
  );
}
