/**
 * `pnpm --filter @cyclone/example-quickstart demo`: Cyclone surviving a worker crash.
 *
 * 1. Uses DATABASE_URL, or else starts an embedded PostgreSQL under .cyclone/ and migrates.
 * 2. Starts two worker processes and submits 50 order runs (reserve → charge ‖ email → fulfil).
 * 3. SIGKILLs one worker while it has steps in flight, and starts a replacement.
 * 4. Waits for every run and checks what Cyclone promises: all runs complete, the killed
 *    worker's steps are recovered (lease expired → run again), and every completionTx write
 *    exists exactly once per (run, node). Exit 0 only when all of that holds.
 */
import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { dirname, join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { Client } from '@cyclone/core';
import { resolveDatabaseUrl } from '@cyclone/core/embedded';
import { createTables, Order } from './workflow.js';

const RUNS = 50;
const TIMEOUT_MS = 45_000;
const here = dirname(fileURLToPath(import.meta.url));
const say = (line: string) => process.stdout.write(`${line}\n`);

interface Child {
  name: string;
  proc: ChildProcessWithoutNullStreams;
  workerId: Promise<string>;
}

/** Starts `src/worker.ts` as a child process with the same loader flags as this one (tsx). */
function startWorker(name: string, databaseUrl: string): Child {
  const proc = spawn(process.execPath, [...process.execArgv, join(here, 'worker.ts')], {
    env: { ...process.env, DATABASE_URL: databaseUrl },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  proc.stderr.on('data', (chunk: Buffer) => {
    for (const line of chunk.toString().trimEnd().split('\n'))
      process.stderr.write(`[${name}] ${line}\n`);
  });
  const workerId = new Promise<string>((res, rej) => {
    createInterface({ input: proc.stdout }).on('line', (line) => {
      const m = line.match(/^READY (.+)$/);
      if (m?.[1]) res(m[1]);
    });
    proc.on('exit', (code, signal) =>
      rej(new Error(`worker ${name} exited early (${signal ?? code})`)),
    );
  });
  return { name, proc, workerId };
}

async function waitUntil<T>(
  what: string,
  check: () => Promise<T | undefined | false>,
  ms = TIMEOUT_MS,
): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await check();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function main(): Promise<number> {
  // The script runs in apps/quickstart; keep .cyclone/ where the command was typed (INIT_CWD).
  const db = await resolveDatabaseUrl({
    dir: resolve(process.env.INIT_CWD ?? process.cwd(), '.cyclone'),
  });
  const client = new Client({ connectionString: db.connectionString });
  const children: Child[] = [];
  try {
    await client.migrate();
    await createTables(client);
    const batch = randomBytes(4).toString('hex');
    say(`quickstart: batch ${batch}: ${RUNS} orders, workflow reserve → charge ‖ email → fulfil`);

    const [w1, w2] = [
      startWorker('w1', db.connectionString),
      startWorker('w2', db.connectionString),
    ];
    children.push(w1, w2);
    const victimId = await w1.workerId;
    await w2.workerId;
    say(`quickstart: started workers w1 (pid ${w1.proc.pid}) and w2 (pid ${w2.proc.pid})`);

    const started = Date.now();
    const runIds: string[] = [];
    for (let i = 0; i < RUNS; i++) {
      const { runId } = await client.submitOnce(Order, `${batch}-${i}`, {
        batch,
        orderId: `${batch}-${i}`,
        item: 'widget',
        quantity: 1 + (i % 3),
        amountCents: 1999 + i,
        email: `customer${i}@example.com`,
      });
      runIds.push(runId);
    }
    say(`quickstart: submitted ${RUNS} runs`);

    // Kill w1 once the batch is under way and w1 holds leases on at least two running steps.
    const inFlight = await waitUntil('worker w1 to have steps in flight', async () => {
      const { rows } = await client.pool.query<{ held: number; done: number }>(
        `SELECT count(*) FILTER (WHERE state = 'running' AND lease_owner = $2)::int AS held,
                count(*) FILTER (WHERE state = 'completed')::int AS done
         FROM cyclone.cyclone_steps WHERE run_id = ANY($1::uuid[])`,
        [runIds, victimId],
      );
      const r = rows[0];
      return r && r.held >= 2 && r.done >= RUNS ? r.held : undefined;
    });
    w1.proc.kill('SIGKILL');
    say(
      `quickstart: SIGKILL worker w1 (pid ${w1.proc.pid}) with ${inFlight} steps in flight; starting w3`,
    );
    const w3 = startWorker('w3', db.connectionString);
    children.push(w3);
    await w3.workerId;

    await waitUntil('all runs to finish', async () => {
      const { rows } = await client.pool.query<{ open: number }>(
        `SELECT count(*)::int AS open FROM cyclone.cyclone_runs WHERE id = ANY($1::uuid[]) AND state = 'running'`,
        [runIds],
      );
      return rows[0]?.open === 0;
    });
    const seconds = ((Date.now() - started) / 1000).toFixed(1);

    const one = async <T>(text: string, values: unknown[]): Promise<T> =>
      (await client.pool.query(text, values)).rows[0] as T;
    const runs = await one<{ completed: number }>(
      `SELECT count(*) FILTER (WHERE state = 'completed')::int AS completed
       FROM cyclone.cyclone_runs WHERE id = ANY($1::uuid[])`,
      [runIds],
    );
    // A step the killed worker held ran again after the sweep found its lease expired.
    const steps = await one<{ total: number; recovered: number }>(
      `SELECT count(*)::int AS total,
              count(*) FILTER (WHERE errors @> '[{"kind": "lease_expired"}]')::int AS recovered
       FROM cyclone.cyclone_steps WHERE run_id = ANY($1::uuid[])`,
      [runIds],
    );
    const calls = await one<{ calls: number }>(
      'SELECT count(*)::int AS calls FROM quickstart.calls WHERE batch = $1',
      [batch],
    );
    const effects = await one<{ rows: number; pairs: number; duplicates: number }>(
      `SELECT coalesce(sum(n), 0)::int AS rows, count(*)::int AS pairs,
              count(*) FILTER (WHERE n > 1)::int AS duplicates
       FROM (SELECT run_id, node, count(*) AS n FROM quickstart.effects
             WHERE batch = $1 GROUP BY run_id, node) AS t`,
      [batch],
    );

    const expectedSteps = RUNS * Order.nodes.length;
    const checks: [string, boolean][] = [
      [`runs completed              ${runs.completed} / ${RUNS}`, runs.completed === RUNS],
      [
        `steps recovered from w1     ${steps.recovered} (lease expired, reclaimed by the sweep, run again)`,
        steps.recovered >= 1,
      ],
      [
        `handler calls               ${calls.calls} for ${steps.total} steps (at least once: ${calls.calls - steps.total} repeated)`,
        calls.calls >= steps.total,
      ],
      [
        `completionTx rows           ${effects.rows} for ${effects.pairs} (run, node) pairs: exactly 1 each`,
        effects.rows === expectedSteps && effects.pairs === expectedSteps,
      ],
      [`duplicates                  ${effects.duplicates}`, effects.duplicates === 0],
    ];
    say(`quickstart: all ${RUNS} runs finished in ${seconds} s\n`);
    for (const [line, ok] of checks) say(`  ${ok ? '✓' : '✗'} ${line}`);
    const failed = checks.filter(([, ok]) => !ok).length;
    say(
      failed === 0
        ? '\nOK: every invariant holds. Inspect a run with `pnpm cyclone runs` and `pnpm cyclone run <runId>`.'
        : `\nFAILED: ${failed} invariant(s) do not hold`,
    );
    return failed === 0 ? 0 : 1;
  } finally {
    for (const c of children)
      if (c.proc.exitCode === null && c.proc.signalCode === null) c.proc.kill('SIGTERM');
    await Promise.all(
      children.map((c) =>
        c.proc.exitCode !== null || c.proc.signalCode !== null
          ? undefined
          : new Promise((r) => c.proc.once('exit', r)),
      ),
    );
    await client.close();
    await db.stop();
  }
}

main().then(
  (code) => process.exit(code),
  (err) => {
    process.stderr.write(`quickstart: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  },
);
