/**
 * graphile-worker under test (the latest release that supports Node 20; 0.18 needs Node 22).
 * Completed jobs are deleted; there is no DAG, so the `dag` workload chains jobs: the root job
 * adds eight jobs, each decrements a counter row, and the one that reaches 0 adds the join job.
 */
import { randomUUID } from 'node:crypto';
import {
  type JobHelpers,
  Logger,
  makeWorkerUtils,
  type RunnerOptions,
  run,
  runMigrations,
  type TaskList,
} from 'graphile-worker';
import pg from 'pg';
import { chunks, packageVersion } from '../util.js';
import { onJobStart } from './hooks.js';
import type { Producer, System, Variant, Workload } from './types.js';

/** Logs warnings and errors only: by default every completed job logs a line at `info`. */
const quietLogger = new Logger(() => (level, message) => {
  if (level === 'error' || level === 'warning') {
    process.stderr.write(`[graphile-worker ${level}] ${message}\n`);
  }
});

type Options = Pick<RunnerOptions, 'concurrency' | 'pollInterval' | 'preset'>;
const VARIANTS: Partial<Record<Variant, Options>> = {
  // Defaults: concurrency 1, pollInterval 2000 ms, maxPoolSize 10, LISTEN/NOTIFY, no local
  // queue, no completion batching.
  default: {},
  // The documented throughput settings: a local queue (jobs fetched and locked in batches) and
  // batched completion (https://worker.graphile.org/docs/performance#batching).
  tuned: {
    concurrency: 24,
    preset: {
      worker: { localQueue: { size: 500 }, completeJobBatchDelay: 0, failJobBatchDelay: 0 },
    },
  },
};

const describe = (v: Variant): string | undefined => {
  const o = VARIANTS[v];
  if (!o) return undefined;
  return Object.keys(o).length === 0
    ? 'defaults: concurrency 1, pollInterval 2000, maxPoolSize 10, LISTEN/NOTIFY, no local queue'
    : JSON.stringify(o);
};

type DagPayload = { run: string; kind: 'root' | 'mid' | 'leaf' };

const tasks: TaskList = {
  noop: async (payload) => {
    await onJobStart(payload);
  },
  write: async (payload, helpers: JobHelpers) => {
    await onJobStart(payload);
    // One autocommit statement on the worker's pool: the job's own transaction.
    await helpers.query('INSERT INTO public.bench_rows (k) VALUES ($1)', [helpers.job.id]);
  },
  dag: async (payload, helpers: JobHelpers) => {
    await onJobStart(payload);
    const { run: id, kind } = payload as DagPayload;
    if (kind === 'root') {
      await helpers.query('INSERT INTO public.bench_dag (run, remaining) VALUES ($1, 8)', [id]);
      await helpers.addJobs(
        Array.from({ length: 8 }, () => ({ identifier: 'dag', payload: { run: id, kind: 'mid' } })),
      );
    } else if (kind === 'mid') {
      const { rows } = await helpers.query<{ remaining: number }>(
        'UPDATE public.bench_dag SET remaining = remaining - 1 WHERE run = $1 RETURNING remaining',
        [id],
      );
      if (rows[0]?.remaining === 0) await helpers.addJob('dag', { run: id, kind: 'leaf' });
    }
  },
};

function payloadOf(workload: Workload): Record<string, unknown> {
  return workload === 'dag' ? { run: randomUUID(), kind: 'root' } : {};
}

export const system: System = {
  info: () => ({
    name: 'graphile-worker',
    version: packageVersion('graphile-worker'),
    variants: { default: describe('default'), tuned: describe('tuned') },
    missing: {
      short: 'no lock timeout option: a job locked by a dead worker is picked again only after 4 h',
    },
    defaultRecovery:
      'not measured: a locked job becomes available again 4 h after locked_at (get_job job_expiry; reset scan every 8–10 min)',
  }),

  async install(url) {
    await runMigrations({ connectionString: url, logger: quietLogger });
  },

  async producer(url) {
    const utils = await makeWorkerUtils({ connectionString: url, logger: quietLogger });
    const p: Producer = {
      // `addJobs`: one statement per 1,000 jobs.
      async bulk(workload, count) {
        for (const n of chunks(count, 1_000)) {
          await utils.addJobs(
            Array.from({ length: n }, () => ({
              identifier: workload,
              payload: payloadOf(workload),
            })),
          );
        }
      },
      async one(workload, payload) {
        await utils.addJob(workload, { ...payloadOf(workload), ...payload });
      },
      close: async () => {
        await utils.release();
      },
    };
    return p;
  },

  async insertHistory(pool, count) {
    // Completed jobs are deleted, so what graphile-worker keeps is permanently failed jobs.
    await pool.query(
      `INSERT INTO graphile_worker._private_tasks (identifier) VALUES ('noop') ON CONFLICT DO NOTHING`,
    );
    await pool.query(
      `INSERT INTO graphile_worker._private_jobs
         (task_id, payload, attempts, max_attempts, last_error, run_at, created_at, updated_at)
       SELECT (SELECT id FROM graphile_worker._private_tasks WHERE identifier = 'noop'), '{}',
              25, 25, 'history: failed permanently', now() - interval '1 day',
              now() - interval '1 day', now() - interval '1 day'
       FROM generate_series(1, $1)`,
      [count],
    );
    return `${count} permanently failed jobs of the same task (completed jobs are deleted, so this is the history it keeps)`;
  },

  async idFloor(pool) {
    const { rows } = await pool.query<{ id: string }>(
      'SELECT coalesce(max(id), 0)::text AS id FROM graphile_worker._private_jobs',
    );
    return rows[0]?.id ?? '0';
  },

  async startWorker(spec) {
    const options = VARIANTS[spec.variant];
    if (!options) throw new Error(`graphile-worker has no '${spec.variant}' variant`);
    const runner = await run({
      connectionString: spec.url,
      taskList: tasks,
      noHandleSignals: true,
      logger: quietLogger,
      crontab: '',
      ...options,
    });
    const monitor = new pg.Pool({ connectionString: spec.url, max: 1 });
    const floor = spec.idFloor ?? '0';
    return {
      async pending() {
        const { rows } = await monitor.query<{ n: number }>(
          '/* bench:monitor */ SELECT count(*)::int AS n FROM graphile_worker._private_jobs WHERE id > $1',
          [floor],
        );
        return rows[0]?.n ?? 0;
      },
      async stop() {
        await runner.stop();
        await monitor.end();
      },
    };
  },
};
