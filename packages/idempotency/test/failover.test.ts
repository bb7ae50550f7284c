/**
 * Failover to a synchronous standby while three real worker processes run a load: the primary
 * (every process of it) is SIGKILLed mid-run, the standby promoted, and the address the workers
 * use (a proxy the test owns: @cyclone/testkit/replication) moves to it. Nothing acknowledged
 * may be lost: every confirmed submission completes, each node has exactly one completionTx row,
 * each charge exactly one effect at a provider that does not deduplicate, and every worker
 * reconnects by itself and completes steps again. Needs PostgreSQL's server binaries
 * (postgresql-15: initdb, pg_ctl, pg_basebackup); without them it is reported as skipped.
 */
import { Client } from '@cyclone/core';
import { type ChildWorker, killAllChildren, spawnWorker, waitFor } from '@cyclone/testkit';
import { postgresBinDir, ReplicatedCluster } from '@cyclone/testkit/replication';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrateIdempotency } from '../src/index.js';
import { FAILOVER_BUSINESS, FAILOVER_NODES, FailoverFlow } from './support/failover-flows.js';
import { FakeProvider } from './support/provider.js';

const bins = postgresBinDir();
const skipReason = 'reason' in bins ? bins.reason : undefined;
if (skipReason) console.warn(`failover test skipped: ${skipReason}`);

const WORKERS = 3;
const LEASE_MS = 2_000;

describe.skipIf(skipReason !== undefined)('failover to a synchronous standby', () => {
  let cluster: ReplicatedCluster;
  let client: Client;
  let provider: FakeProvider;
  const workers: ChildWorker[] = [];

  beforeAll(async () => {
    cluster = await ReplicatedCluster.start();
    client = new Client({
      connectionString: cluster.url('postgres', 'failover-test'),
      poolSize: 4,
    });
    await migrateIdempotency(client);
    await client.pool.query(FAILOVER_BUSINESS);
    provider = await FakeProvider.start(); // no deduplication: a second call is a second effect
    for (let i = 1; i <= WORKERS; i++) {
      workers.push(
        await spawnWorker({
          script: new URL('./support/failover-worker.ts', import.meta.url),
          label: `w${i}`,
          env: {
            DATABASE_URL: cluster.url('postgres', `failover-w${i}`),
            PROVIDER_URL: provider.url,
            WORKER_LABEL: `w${i}`,
            CRASH_LEASE_MS: String(LEASE_MS),
          },
          readyTimeoutMs: 60_000,
        }),
      );
    }
  }, 180_000);

  afterAll(async () => {
    await killAllChildren();
    await client?.close().catch(() => {});
    await provider?.close();
    await cluster?.close();
  });

  it('loses no run and repeats no effect; the workers carry on by themselves', async () => {
    // The load: submitOnce with a key per run, sent again until confirmed (a submission cut off
    // by the failover may or may not have committed: the key makes the retry safe).
    const confirmed = new Map<string, string>();
    let stopLoad = false;
    let retries = 0;
    const load = (async () => {
      for (let n = 0; !stopLoad; n++) {
        const key = `fo-${n}`;
        for (;;) {
          try {
            const { runId } = await client.submitOnce(FailoverFlow, key, {
              orderId: key,
              amount: 100 + n,
            });
            confirmed.set(key, runId);
            break;
          } catch {
            retries++;
            await new Promise((r) => setTimeout(r, 100));
          }
        }
        await new Promise((r) => setTimeout(r, 125));
      }
    })();

    const q = async <T extends Record<string, unknown>>(sql: string, values: unknown[] = []) =>
      (await client.pool.query<T>(sql, values)).rows;

    // Mid-run: some steps completed, some held by workers right now.
    await waitFor(
      'a load in full swing',
      async () => {
        const [r] = await q<{ done: number; running: number }>(
          `SELECT count(*) FILTER (WHERE state = 'completed')::int AS done,
                  count(*) FILTER (WHERE state = 'running')::int AS running
           FROM cyclone.cyclone_steps`,
        );
        if ((r?.done ?? 0) >= 60 && (r?.running ?? 0) >= 3) return true;
        throw new Error(`${r?.done} steps completed, ${r?.running} running`);
      },
      { timeoutMs: 90_000, intervalMs: 100 },
    );
    const heldAtKill = await q<{ run_id: string; node: string; attempt: number }>(
      `SELECT run_id, node, attempt FROM cyclone.cyclone_steps WHERE state = 'running'`,
    );
    const f = await cluster.failover({ detectionMs: 1_000 });

    // Back to work: the first step completed after the kill, and a step by each worker.
    const since = new Date(f.killedAt);
    const firstDone = await waitFor(
      'a step completed on the new primary',
      async () =>
        (
          await q<{ at: Date | null }>(
            'SELECT min(at) AS at FROM failover_business WHERE at > $1',
            [since],
          )
        )[0]?.at,
      { timeoutMs: 60_000, intervalMs: 50 },
    );
    const perWorker = await waitFor(
      'every worker completing steps again',
      async () => {
        const rows = await q<{ worker: string; at: Date }>(
          'SELECT worker, min(at) AS at FROM failover_business WHERE at > $1 GROUP BY worker',
          [since],
        );
        return rows.length === WORKERS ? rows : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 100 },
    );

    // A few more seconds of load on the new primary, then let everything finish.
    await new Promise((r) => setTimeout(r, 3_000));
    stopLoad = true;
    await load;
    const runIds = [...confirmed.values()];
    await waitFor(
      'every confirmed run completed',
      async () => {
        const [r] = await q<{ n: number }>(
          `SELECT count(*)::int AS n FROM cyclone.cyclone_runs
           WHERE id = ANY($1::uuid[]) AND state = 'completed'`,
          [runIds],
        );
        return r?.n === runIds.length;
      },
      { timeoutMs: 120_000, intervalMs: 250 },
    );

    // No run lost, and no run beyond the confirmed ones but the unconfirmed retries' own.
    const runs = await q<{ id: string; state: string; submit_key: string }>(
      'SELECT id, state, submit_key FROM cyclone.cyclone_runs',
    );
    const byKey = new Map(runs.map((r) => [r.submit_key, r]));
    const lost = [...confirmed].filter(([key, id]) => byKey.get(key)?.id !== id);
    expect(lost).toEqual([]);

    // Exactly one completionTx row per node of every run.
    const rows = await q<{ run_id: string; node: string; n: number }>(
      'SELECT run_id, node, count(*)::int AS n FROM failover_business GROUP BY 1, 2',
    );
    const rowCount = new Map(rows.map((r) => [`${r.run_id}:${r.node}`, r.n]));
    const wrongRows = runs
      .flatMap((r) =>
        FAILOVER_NODES.map((node) => ({
          key: `${r.id}:${node}`,
          rows: rowCount.get(`${r.id}:${node}`) ?? 0,
        })),
      )
      .filter((x) => x.rows !== 1);
    expect(wrongRows).toEqual([]);
    expect(rows.length).toBe(runs.length * FAILOVER_NODES.length);

    // Exactly one effect per charge, the one the ledger recorded.
    const effectsByKey = new Map<string, number>();
    for (const e of provider.effects)
      effectsByKey.set(e.key ?? '', (effectsByKey.get(e.key ?? '') ?? 0) + 1);
    const wrongEffects = runs
      .map((r) => ({ key: `${r.id}:charge`, effects: effectsByKey.get(`${r.id}:charge`) ?? 0 }))
      .filter((x) => x.effects !== 1);
    expect(wrongEffects).toEqual([]);
    expect(provider.effects.length).toBe(runs.length);
    const ledger = await q<{ phase: string; n: number }>(
      'SELECT phase, count(*)::int AS n FROM cyclone.cyclone_idempotency GROUP BY phase',
    );
    expect(ledger).toEqual([{ phase: 'succeeded', n: runs.length }]);

    // The steps held at the kill all ran again or were completed by their last COMMIT.
    const after = await q<{ run_id: string; node: string; state: string; attempt: number }>(
      `SELECT run_id, node, state, attempt FROM cyclone.cyclone_steps
       WHERE (run_id, node) IN (SELECT * FROM unnest($1::uuid[], $2::text[]))`,
      [heldAtKill.map((h) => h.run_id), heldAtKill.map((h) => h.node)],
    );
    expect(after.filter((s) => s.state !== 'completed')).toEqual([]);

    // Nobody restarted a worker: each process is the one spawned before the failover.
    for (const w of workers) expect(w.exit, w.describe()).toBeUndefined();

    const sec = (ms: number) => `${(ms / 1000).toFixed(2)} s`;
    const workerTimes = perWorker
      .map((w) => `${w.worker} ${sec(new Date(w.at).getTime() - f.killedAt)}`)
      .sort();
    console.log(
      `failover: ${confirmed.size} runs confirmed (${retries} submissions retried), ${heldAtKill.length} steps held at the kill; ` +
        `primary killed → standby promoted ${sec(f.promotedAt - f.killedAt)} (detection 1 s); ` +
        `kill → first step completed ${sec(new Date(firstDone).getTime() - f.killedAt)}; ` +
        `kill → each worker completing steps: ${workerTimes.join(', ')}; ` +
        `0 runs lost, ${rows.length} completionTx rows (1 per node), ${provider.effects.length} effects (1 per charge); ` +
        `proxy resets ${cluster.proxy.counts.reset}, refused ${cluster.proxy.counts.refused}`,
    );
  }, 240_000);
});
