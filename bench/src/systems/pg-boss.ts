/**
 * pg-boss under test (10.x, the last major that supports Node 20; 11+ needs Node 22). Completed
 * jobs stay in the queue's partition of `pgboss.job` until archived (12 h by default). No DAG:
 * the `dag` workload chains jobs like graphile-worker's (see graphile-worker.ts).
 */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import PgBoss from 'pg-boss';
import { chunks, packageVersion, sleep } from '../util.js';
import { onJobStart } from './hooks.js';
import type { Producer, RunningWorker, System, Variant, Workload } from './types.js';

const QUEUES: readonly Workload[] = ['noop', 'dag', 'write'];

/** Constructor options (producer and worker) and how the worker takes jobs, per variant. */
const VARIANTS: Partial<
  Record<Variant, { options: PgBoss.ConstructorOptions; loop: 'work' | 'fetch'; text: string }>
> = {
  default: {
    options: {},
    loop: 'work',
    text: 'defaults: work() with batchSize 1, pollingIntervalSeconds 2 (no LISTEN/NOTIFY), pool max 10, expireIn 15 min, maintenance every 120 s',
  },
  tuned: {
    options: {},
    loop: 'fetch',
    text: 'fetch({ batchSize: 100 }) → handlers in parallel → complete(ids), 2 loops per queue, back to back while jobs come, else 500 ms (its minimum poll); pool max 10. work() waits pollingInterval after every batch, so it caps at batchSize/0.5 s',
  },
  short: {
    options: { expireInSeconds: 3, maintenanceIntervalSeconds: 1, pollingIntervalSeconds: 0.5 },
    loop: 'work',
    text: 'expireInSeconds 3 (no heartbeat: it is also a hard time limit), maintenanceIntervalSeconds 1, pollingIntervalSeconds 0.5',
  },
};

type DagPayload = { run: string; kind: 'root' | 'mid' | 'leaf' };

function payloadOf(workload: Workload): Record<string, unknown> {
  return workload === 'dag' ? { run: randomUUID(), kind: 'root' } : {};
}

function variant(v: Variant) {
  const c = VARIANTS[v];
  if (!c) throw new Error(`pg-boss has no '${v}' variant`);
  return c;
}

export const system: System = {
  info: () => ({
    name: 'pg-boss',
    version: packageVersion('pg-boss'),
    variants: {
      default: VARIANTS.default?.text,
      tuned: VARIANTS.tuned?.text,
      short: VARIANTS.short?.text,
    },
    pollOnlyMs: { default: 2_000, tuned: 500, short: 500 },
    defaultRecovery:
      'not measured: an active job is failed (then retried) once expireIn (15 min) has passed, by maintenance every 120 s: ≥ 15 min',
  }),

  async install(url) {
    const boss = new PgBoss({ connectionString: url, max: 2, supervise: false, schedule: false });
    boss.on('error', () => {});
    await boss.start();
    for (const q of QUEUES) await boss.createQueue(q);
    await boss.stop({ graceful: false, wait: true });
  },

  async producer(url, v) {
    const boss = new PgBoss({
      connectionString: url,
      max: 10,
      supervise: false,
      schedule: false,
      migrate: false,
      ...variant(v).options,
    });
    boss.on('error', (err) => process.stderr.write(`[pg-boss] ${String(err)}\n`));
    await boss.start();
    const p: Producer = {
      // `insert`: one statement per 1,000 jobs.
      async bulk(workload, count) {
        for (const n of chunks(count, 1_000)) {
          await boss.insert(
            Array.from({ length: n }, () => ({ name: workload, data: payloadOf(workload) })),
          );
        }
      },
      async one(workload, payload) {
        await boss.send(workload, { ...payloadOf(workload), ...payload });
      },
      close: () => boss.stop({ graceful: false, wait: true }),
    };
    return p;
  },

  async insertHistory(pool, count) {
    await pool.query(
      `INSERT INTO pgboss.job (name, data, state, policy, started_on, completed_on, created_on,
                              keep_until)
       SELECT 'noop', '{}', 'completed', 'standard', now() - interval '1 hour',
              now() - interval '1 hour', now() - interval '1 hour', now() + interval '14 days'
       FROM generate_series(1, $1)`,
      [count],
    );
    return `${count} completed jobs in the same queue (kept until archived, 12 h by default)`;
  },

  async startWorker(spec) {
    const v = variant(spec.variant);
    const boss = new PgBoss({ connectionString: spec.url, ...v.options });
    boss.on('error', (err) => process.stderr.write(`[pg-boss] ${String(err)}\n`));
    await boss.start();
    // Application writes (the `write` and `dag` workloads) go through the app's own pool.
    const app = new pg.Pool({ connectionString: spec.url, max: 10 });

    const handle = async (job: PgBoss.Job<object>) => {
      await onJobStart(job.data);
      if (spec.workload === 'write') {
        await app.query('INSERT INTO public.bench_rows (k) VALUES ($1)', [job.id]);
      } else if (spec.workload === 'dag') {
        const { run: id, kind } = job.data as DagPayload;
        if (kind === 'root') {
          await app.query('INSERT INTO public.bench_dag (run, remaining) VALUES ($1, 8)', [id]);
          await boss.insert(
            Array.from({ length: 8 }, () => ({ name: 'dag', data: { run: id, kind: 'mid' } })),
          );
        } else if (kind === 'mid') {
          const { rows } = await app.query<{ remaining: number }>(
            'UPDATE public.bench_dag SET remaining = remaining - 1 WHERE run = $1 RETURNING remaining',
            [id],
          );
          if (rows[0]?.remaining === 0) await boss.send('dag', { run: id, kind: 'leaf' });
        }
      }
    };

    const queue = spec.workload;
    let stopping = false;
    let completed = 0;
    const loops: Promise<void>[] = [];
    if (v.loop === 'work') {
      // The polling interval comes from the constructor options.
      await boss.work<object>(queue, async (jobs) => {
        for (const job of jobs) await handle(job);
      });
    } else {
      for (let i = 0; i < 2; i++) {
        loops.push(
          (async () => {
            while (!stopping) {
              const jobs = await boss.fetch<object>(queue, { batchSize: 100 });
              if (jobs.length === 0) {
                await sleep(500);
                continue;
              }
              await Promise.all(jobs.map(handle));
              await boss.complete(
                queue,
                jobs.map((j) => j.id),
              );
              completed += jobs.length;
            }
          })(),
        );
      }
    }
    const monitor = new pg.Pool({ connectionString: spec.url, max: 1 });
    const worker: RunningWorker = {
      async stop() {
        stopping = true;
        await Promise.allSettled(loops);
        await boss.stop({ graceful: false, wait: true });
        await app.end();
        await monitor.end();
      },
    };
    if (v.loop === 'fetch') {
      worker.completed = () => completed;
    } else {
      worker.pending = async () => {
        const { rows } = await monitor.query<{ n: number }>(
          `/* bench:monitor */ SELECT count(*)::int AS n FROM pgboss.job
           WHERE name = $1 AND state < 'completed'`,
          [queue],
        );
        return rows[0]?.n ?? 0;
      };
    }
    return worker;
  },
};
