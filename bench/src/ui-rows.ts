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
 *
 * **17m** and **17mr**: the UI server's resident memory on the same database. The real server
 * (`cyclone ui --read-only --port 0`, the CLI of @cyclone/core run from source, in a child
 * process) answers a few hundred API reads over HTTP: runs list pages over the same filters, the
 * newest and the next older one, and about one read in eight a run's detail (300 reads, full:
 * 1,000). **17m** is its peak RSS
 * (VmHWM of /proc/<pid>/status) in MiB, **17mr** its RSS (VmRSS) after the reads.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { createUiReader, type UiRunsFilter } from '@cyclone/core/internal';
import pg from 'pg';
import { seedHistory } from '../../packages/core/test/support/seed-history.js';
import { BENCH_DIR } from './build-child.js';
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

/** HTTP reads the UI server answers before its memory is read. */
const httpReadsOf = (mode: ModeSize) => (mode.name === 'quick' ? 300 : 1_000);

/** The repository's root: the CLI runs from its source there, as `pnpm cyclone` does. */
const REPO_DIR = resolve(BENCH_DIR, '..');

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
    {
      id: '17m',
      title: '17. … UI server (`cyclone ui`) peak RSS over the HTTP reads',
      unit: 'MiB',
      higherIsBetter: false,
      digits: 0,
    },
    {
      id: '17mr',
      title: '17. … UI server RSS after the HTTP reads',
      unit: 'MiB',
      higherIsBetter: false,
      digits: 0,
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
      const mem = await uiServerMemory(url, httpReadsOf(mode));
      const memNote = `${mem.reads} HTTP reads (${mem.details} run details); ${mem.idleMiB.toFixed(0)} MiB once listening`;
      ctx.results.add('17m', 'cyclone', mem.peakMiB, memNote);
      ctx.results.add('17mr', 'cyclone', mem.afterMiB, memNote);
      ctx.log(
        `  17m cyclone: UI server peak RSS ${mem.peakMiB.toFixed(0)} MiB, after the reads ${mem.afterMiB.toFixed(0)} MiB (${memNote})`,
      );
    }),
  );
}

/** A figure of /proc/<pid>/status (`VmHWM`, `VmRSS`: kB) in MiB. */
function statusMiB(pid: number, field: 'VmHWM' | 'VmRSS'): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const match = new RegExp(`^${field}:\\s+(\\d+) kB$`, 'm').exec(status);
  if (!match) throw new Error(`no ${field} in /proc/${pid}/status`);
  return Number(match[1]) / 1024;
}

/** The UI server's memory over the HTTP reads, MiB. */
interface UiServerMemory {
  idleMiB: number;
  peakMiB: number;
  afterMiB: number;
  reads: number;
  details: number;
}

/**
 * Starts `cyclone ui` on `url` in a child process, reads `reads` API answers from it over HTTP and
 * returns its RSS figures; the child is stopped with SIGTERM (SIGKILL after 10 s) either way.
 * @throws Error when the server does not start within 60 s or an answer is not 200.
 */
async function uiServerMemory(url: string, reads: number): Promise<UiServerMemory> {
  // cwd packages/ui: the CLI finds @cyclone/ui from the working directory's package.
  const child = spawn(
    process.execPath,
    [
      '--conditions=@cyclone/source',
      resolve(REPO_DIR, 'tools/cli-source/cyclone.mjs'),
      '--database-url',
      url,
      'ui',
      '--read-only',
      '--port',
      '0',
    ],
    { cwd: resolve(REPO_DIR, 'packages/ui'), stdio: ['ignore', 'pipe', 'pipe'] },
  );
  try {
    const base = await listeningAt(child);
    const pid = child.pid as number;
    const idleMiB = statusMiB(pid, 'VmRSS');
    const get = async (path: string): Promise<unknown> => {
      const res = await fetch(`${base}${path}`);
      if (res.status !== 200) {
        throw new Error(`GET ${path}: ${res.status} ${(await res.text()).slice(0, 200)}`);
      }
      return res.json();
    };
    let done = 0;
    let details = 0;
    for (let i = 0; done < reads; i++) {
      const filter = FILTERS[i % FILTERS.length] as UiRunsFilter;
      const params = new URLSearchParams({ ...(filter as Record<string, string>), limit: '50' });
      const page = (await get(`/api/runs?${params}`)) as {
        items: { runId: string }[];
        next: string | null;
      };
      done++;
      const last = page.items[page.items.length - 1];
      if (i % 5 === 4 && last !== undefined) {
        // A run's detail, as a click on a row of the list asks for it.
        await get(`/api/runs/${last.runId}`);
        details++;
        done++;
      } else if (i % 2 === 1 && page.next !== null) {
        params.set('cursor', page.next);
        await get(`/api/runs?${params}`);
        done++;
      }
    }
    return {
      idleMiB,
      peakMiB: statusMiB(pid, 'VmHWM'),
      afterMiB: statusMiB(pid, 'VmRSS'),
      reads: done,
      details,
    };
  } finally {
    await stopChild(child);
  }
}

/** The server's base URL, from the line the CLI prints once it listens. */
function listeningAt(child: ChildProcess): Promise<string> {
  return new Promise((resolvePromise, reject) => {
    let out = '';
    let err = '';
    const timer = setTimeout(
      () => fail(new Error(`cyclone ui did not start in 60 s: ${err}`)),
      60_000,
    );
    const fail = (e: Error) => {
      clearTimeout(timer);
      reject(e);
    };
    child.stderr?.on('data', (d: Buffer) => {
      err = (err + d.toString()).slice(-2000);
    });
    child.stdout?.on('data', (d: Buffer) => {
      out += d.toString();
      const match = /Cyclone UI on (http:\/\/[^/\s]+)/.exec(out);
      if (match) {
        clearTimeout(timer);
        resolvePromise(match[1] as string);
      }
    });
    child.once('exit', (code) => fail(new Error(`cyclone ui exited (${code}): ${err}`)));
  });
}

/** Stops the child with SIGTERM, then SIGKILL after 10 s; resolves once it has exited. */
async function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((done) => child.once('exit', () => done()));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
  await exited;
  clearTimeout(timer);
}
