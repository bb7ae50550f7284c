/**
 * Cyclone under test: the workspace's `@cyclone/core` (its source, through the
 * `@cyclone/source` export condition), so the benchmark measures the engine as it is now.
 */
import { execFileSync } from 'node:child_process';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  Client,
  consoleLogger,
  newAction,
  newWorkflow,
  Worker,
  type WorkerOptions,
} from '@cyclone/core';
import pg from 'pg';
import { chunks, packageVersion } from '../util.js';
import { onJobStart } from './hooks.js';
import type { FlowWorkload, Producer, System, Variant, Workload } from './types.js';

/** Worker options of each variant (besides `client` and `workflows`). */
const VARIANTS: Record<Variant, Partial<WorkerOptions>> = {
  // Everything at its default: concurrency 10, lease 5 s (heartbeat every 1.7 s), sweep every
  // 1 s ± 20 %, poll 1 s (LISTEN/NOTIFY for pickup), claim batch = free slots, prepared statements.
  default: {},
  // Throughput on a 2-core machine: more steps in flight per claim, the step pool at its
  // default cap of 10 connections. BENCH_CYCLONE_TUNED (JSON WorkerOptions) replaces it, to try
  // engine settings without editing this file.
  tuned: process.env.BENCH_CYCLONE_TUNED
    ? (JSON.parse(process.env.BENCH_CYCLONE_TUNED) as Partial<WorkerOptions>)
    : { concurrency: 500 },
  // Short lease for fast crash recovery (scenario 6): 3 s lease (heartbeat 1 s), sweep every 1 s.
  short: { leaseMs: 3_000, sweepIntervalMs: 1_000 },
};

const describe = (v: Variant) => {
  const o = VARIANTS[v];
  const keys = Object.keys(o);
  return keys.length === 0
    ? 'defaults: concurrency 10, leaseMs 5000 (heartbeat 1.7 s), sweepIntervalMs 1000, pollIntervalMs 1000, LISTEN on, prepared statements'
    : JSON.stringify(o);
};

const step = newAction('bench_step', async (_ctx, input: unknown) => {
  await onJobStart(input);
});

const write = newAction('bench_write', async (ctx, input: unknown) => {
  await onJobStart(input);
  const tx = await ctx.completionTx();
  await tx.query('INSERT INTO public.bench_rows (k) VALUES ($1)', [ctx.runId]);
});

/** Single-node no-op run. Its node is `a`, action `bench_step` (scenario 7's history uses both). */
export const noopFlow = newWorkflow<Record<string, unknown>>('bench_noop', {
  nodes: { a: { action: step } },
});

/** Whether `w` is a flow-control workload (rows 14–16). */
const isFlowWorkload = (w: Workload): w is FlowWorkload =>
  w === 'limited' || w === 'keyed' || w === 'rate';

const fanOut = ['b1', 'b2', 'b3', 'b4', 'b5', 'b6', 'b7', 'b8'];
/** 10 nodes: `a`, then `b1`…`b8` in parallel, then `z` after all eight. */
export const dagFlow = newWorkflow<Record<string, unknown>>('bench_dag', {
  nodes: {
    a: { action: step },
    ...Object.fromEntries(fanOut.map((n) => [n, { action: step, after: ['a'] }])),
    z: { action: step, after: fanOut },
  },
});

/** Single node that writes one row on its completion transaction. */
export const writeFlow = newWorkflow<Record<string, unknown>>('bench_write', {
  nodes: { a: { action: write } },
});

/**
 * Row 12: `a`, then `w` waiting for the signal `go` (an hour's timeout, never reached in the
 * benchmark), then `z` after it. `w` holds no worker slot while it waits.
 */
export const WAIT_SIGNAL = 'go';
export const waitFlow = newWorkflow<Record<string, unknown>>('bench_wait', {
  nodes: {
    a: { action: step },
    w: { waitFor: WAIT_SIGNAL, after: ['a'], timeoutMs: 3_600_000 },
    z: { action: step, after: ['w'] },
  },
});

/** Row 14: a no-op node whose action has a concurrency limit above any worker's concurrency. */
export const limitedFlow = newWorkflow<Record<string, unknown>>('bench_limited', {
  nodes: {
    a: {
      action: newAction('bench_limited', async (_ctx, input: unknown) => onJobStart(input), {
        concurrency: { limit: 100_000 },
      }),
    },
  },
});

/** Row 15: a no-op node whose action allows 1 at a time per key (`input.k`). */
export const keyedFlow = newWorkflow<{ k?: string }>('bench_keyed', {
  nodes: {
    a: {
      action: newAction('bench_keyed', async (_ctx, input: { k?: string }) => onJobStart(input), {
        concurrency: { limit: 1, key: (i) => i.k },
      }),
    },
  },
});

/** Row 16: a no-op node whose action starts at most 1,000 times per second. */
export const rateFlow = newWorkflow<Record<string, unknown>>('bench_rate', {
  nodes: {
    a: {
      action: newAction('bench_rate', async (_ctx, input: unknown) => onJobStart(input), {
        rateLimit: { limit: 1_000, periodMs: 1_000 },
      }),
    },
  },
});

/** Row 15's keys: run i gets key `k<i mod KEYS>`. */
export const BENCH_KEYS = 100;

const FLOWS = {
  noop: noopFlow,
  dag: dagFlow,
  write: writeFlow,
  limited: limitedFlow,
  keyed: keyedFlow,
  rate: rateFlow,
} as const;

function version(): string {
  const v = packageVersion('@cyclone/core');
  try {
    const cwd = dirname(fileURLToPath(import.meta.url));
    const head = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd }).toString().trim();
    const dirty = execFileSync('git', ['status', '--porcelain', '--', '../../../packages/core'], {
      cwd,
    })
      .toString()
      .trim();
    return `${v} (git ${head}${dirty ? ', with uncommitted changes in packages/core' : ''})`;
  } catch {
    return v;
  }
}

export const system: System = {
  info: () => ({
    name: 'cyclone',
    version: version(),
    variants: { default: describe('default'), tuned: describe('tuned'), short: describe('short') },
    defaultRecovery: 'lease 5 s (heartbeat every 1.7 s) + sweep every 1 s ± 20 %',
  }),

  async install(url) {
    const client = new Client({ connectionString: url, poolSize: 1 });
    try {
      await client.migrate();
    } finally {
      await client.close();
    }
  },

  async producer(url) {
    const client = new Client({ connectionString: url, poolSize: 10 });
    const p: Producer = {
      // `submitMany`: one statement per 1,000 runs (their steps included), one call per 1,000
      // like the peers' addJobs/insert.
      async bulk(workload: Workload, count: number) {
        const flow = FLOWS[workload] as typeof noopFlow;
        let i = 0;
        for (const n of chunks(count, 1_000)) {
          await client.submitMany(
            flow,
            Array.from({ length: n }, () =>
              workload === 'keyed' ? { k: `k${i++ % BENCH_KEYS}` } : {},
            ),
          );
        }
      },
      async one(workload, payload) {
        await client.submit(FLOWS[workload] as typeof noopFlow, payload);
      },
      close: () => client.close(),
    };
    return p;
  },

  async insertHistory(pool: pg.Pool, count: number) {
    // Packed (fill factor 100 for this insert, the migration's after it), since finished rows
    // inserted under the fill factor left each page room for just one new step, and the timed
    // run's 20,000 steps went to 20,000 history pages (bench/README.md § Row 7).
    const fill = await pool.query<{ rel: string; ff: string }>(
      `SELECT c.relname AS rel, coalesce((SELECT split_part(o, '=', 2) FROM unnest(c.reloptions) o
                                           WHERE o LIKE 'fillfactor=%'), '100') AS ff
       FROM pg_class c WHERE c.oid IN ('cyclone.cyclone_runs'::regclass,
                                       'cyclone.cyclone_steps'::regclass)`,
    );
    const setFill = (ff: (old: string) => string) =>
      pool.query(
        fill.rows
          .map((r) => `ALTER TABLE cyclone.${r.rel} SET (fillfactor = ${Number(ff(r.ff))})`)
          .join('; '),
      );
    await setFill(() => '100');
    try {
      await insertFinished(pool, count);
    } finally {
      await setFill((old) => old);
    }
    return `${count} completed runs (run + step rows) of the same workflow, packed (fill factor 100 for the insert)`;
  },

  async startWorker(spec) {
    const extra = spec.cyclone;
    // Row 18: the process's workers share one pool; otherwise each worker makes its own pools.
    const shared = extra?.sharedPoolSize
      ? new pg.Pool({ connectionString: spec.url, max: extra.sharedPoolSize })
      : undefined;
    shared?.on('error', () => {});
    const client = shared
      ? new Client({ pool: shared })
      : new Client({ connectionString: spec.url, poolSize: 1 });
    const workers = Array.from(
      { length: extra?.workers ?? 1 },
      () =>
        new Worker({
          client,
          // The wait workflow only for row 12, so that the claim of every other row is unchanged.
          // The wait workflow only for row 12 and a limited one only for its own row, so that
          // the claim of every other row is unchanged.
          workflows: [
            noopFlow,
            dagFlow,
            writeFlow,
            ...(extra?.waitFlow ? [waitFlow] : []),
            ...(isFlowWorkload(spec.workload) ? [FLOWS[spec.workload] as typeof noopFlow] : []),
          ],
          logger: consoleLogger('warn', { system: 'cyclone' }),
          ...VARIANTS[spec.variant],
          ...(extra?.concurrency ? { concurrency: extra.concurrency } : {}),
          ...(extra?.listen !== undefined ? { listen: extra.listen } : {}),
          ...(extra?.pollIntervalMs ? { pollIntervalMs: extra.pollIntervalMs } : {}),
        }),
    );
    for (const w of workers) await w.start();
    return {
      completed: () => workers.reduce((a, w) => a + w.stats.completed, 0),
      async stop() {
        await Promise.all(workers.map((w) => w.stop({ graceMs: 1_000 })));
        await client.close();
        await shared?.end();
      },
    };
  },
};

/** Inserts `count` completed single-step runs of the no-op workflow, a day old (row 7's history). */
async function insertFinished(pool: pg.Pool, count: number): Promise<void> {
  await pool.query(
    `WITH r AS (
       INSERT INTO cyclone.cyclone_runs
         (id, workflow, state, input, input_hash, steps_remaining, steps_active, created_at,
          updated_at, completed_at)
       SELECT gen_random_uuid(), 'bench_noop', 'completed', '{}', 'history', 0, 0,
              now() - interval '1 day', now() - interval '1 day', now() - interval '1 day'
       FROM generate_series(1, $1)
       RETURNING id)
     INSERT INTO cyclone.cyclone_steps
       (run_id, node, workflow, action, state, attempt, max_attempts, deps_remaining,
        scheduled_at, output, created_at, updated_at, started_at, completed_at)
     SELECT id, 'a', 'bench_noop', 'bench_step', 'completed', 1, 25, 0, now() - interval '1 day',
            'null', now() - interval '1 day', now() - interval '1 day', now() - interval '1 day',
            now() - interval '1 day'
     FROM r`,
    [count],
  );
}
