/**
 * Debounce: `submit(wf, input, { debounce: { key, delayMs, maxDelayMs } })`. Concurrent submits
 * of one key from separate clients make one run with the last committed input, started after the
 * last submit's delay (the database's timestamps) and no later than the cap; a submit once the
 * run started makes exactly one follow-up run; keys and workflows are independent; a rolled-back
 * caller transaction leaves nothing; bad options are refused before anything is written.
 */
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  Client,
  type DebouncedSubmitResult,
  InputValidationError,
  MAX_DELAY_MS,
  newAction,
  newWorkflow,
  RunNotFoundError,
  Worker,
} from '../src/index.js';
import { createTestDb, type TestDb } from './support/db.js';

let db: TestDb;
/** Five clients, five pools: the submitters of the concurrent tests. */
let clients: Client[] = [];
let client: Client;
let worker: Worker;

/** Runs that hold here until the test releases them (input `hold: true`). */
let release: () => void = () => {};
const held = new Promise<void>((r) => {
  release = r;
});

const Echo = newAction('debounce_echo', async (_ctx, input: { n: number; hold?: boolean }) => {
  if (input.hold) await held;
  return { n: input.n };
});
const Input = z.object({ n: z.number().int(), hold: z.boolean().optional() });
const flow = (name: string) =>
  newWorkflow(name, { input: Input, nodes: { only: { action: Echo } } });
const Burst = flow('debounce_burst');
const Capped = flow('debounce_capped');
const During = flow('debounce_during');
const Done = flow('debounce_done');
const Race = flow('debounce_race');
const KeysA = flow('debounce_keys_a');
const KeysB = flow('debounce_keys_b');
const Rollback = flow('debounce_rollback');
const Forms = flow('debounce_forms');
const Bad = flow('debounce_bad');
/** Two roots (`b` with its own timer) and a join: a push moves every root, timers kept. */
const Roots = newWorkflow('debounce_roots', {
  input: Input,
  nodes: {
    a: { action: Echo },
    b: { action: Echo, delayMs: 500 },
    c: { action: Echo, after: ['a', 'b'] },
  },
});
/** A wait node after the root: it keeps its signal name in a debounced run. */
const Approval = newWorkflow('debounce_approval', {
  input: Input,
  nodes: { first: { action: Echo }, approval: { waitFor: 'approved', after: ['first'] } },
});
/** A root wait node: its time is its signal's, so debounce refuses the workflow. */
const RootWait = newWorkflow('debounce_root_wait', { nodes: { approval: { waitFor: 'go' } } });
const ALL = [Burst, Capped, During, Done, Race, KeysA, KeysB, Rollback, Forms, Bad, Roots];
const EVENTS = [Approval, RootWait];

beforeAll(async () => {
  db = await createTestDb();
  clients = Array.from({ length: 5 }, () => new Client({ connectionString: db.url, poolSize: 5 }));
  client = clients[0] as Client;
  await db.pool.query(`CREATE TABLE debounce_log (
    seq bigserial PRIMARY KEY, n int NOT NULL, submitted_at timestamptz NOT NULL,
    run_id uuid NOT NULL, debounced boolean NOT NULL)`);
  worker = new Worker({
    client,
    workflows: [...ALL, ...EVENTS],
    concurrency: 10,
    pollIntervalMs: 1_000,
  });
  await worker.start();
});

afterAll(async () => {
  release();
  await worker?.stop({ graceMs: 1_000 });
  await Promise.all(clients.map((c) => c.close()));
  await db?.drop();
});

interface RunRow {
  id: string;
  input: { n: number };
  debounce_key: string | null;
  created_at: Date;
}

/** The runs of `workflow`, oldest first. */
async function runsOf(workflow: string): Promise<RunRow[]> {
  const { rows } = await db.pool.query<RunRow>(
    `SELECT id, input, debounce_key, created_at FROM cyclone.cyclone_runs
     WHERE workflow = $1 ORDER BY created_at, id`,
    [workflow],
  );
  return rows;
}

/** A run's root step `node` as stored. */
async function root(
  runId: string,
  node = 'only',
): Promise<{ state: string; scheduled_at: Date; started_at: Date | null }> {
  const { rows } = await db.pool.query(
    'SELECT state, scheduled_at, started_at FROM cyclone.cyclone_steps WHERE run_id = $1 AND node = $2',
    [runId, node],
  );
  return rows[0];
}

async function countRuns(): Promise<number> {
  const { rows } = await db.pool.query<{ n: number }>(
    'SELECT count(*)::int AS n FROM cyclone.cyclone_runs',
  );
  return (rows[0] as { n: number }).n;
}

/** Resolves once `n` backends of the test database wait for a lock. */
async function lockWaiters(n: number): Promise<void> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const { rows } = await db.pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM pg_stat_activity
       WHERE datname = current_database() AND wait_event_type = 'Lock'`,
    );
    if ((rows[0] as { n: number }).n >= n) return;
    if (Date.now() > deadline) throw new Error(`fewer than ${n} lock waiters after 10 s`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/**
 * One debounced submit in its own transaction on `c`, which also logs it: the database's clock
 * before the submit, and a sequence number taken after it. Every submit of a key that goes
 * through holds that key's run (its row lock, or the unique index entry of the run it inserted)
 * from the submit to its commit, so the sequence orders them as their commits do.
 */
async function loggedSubmit(
  c: Client,
  wf: typeof Burst,
  n: number,
  debounce: { key: string; delayMs: number; maxDelayMs?: number },
  viaWorkflow: boolean,
): Promise<DebouncedSubmitResult> {
  const conn: pg.PoolClient = await c.pool.connect();
  try {
    await conn.query('BEGIN');
    const { rows } = await conn.query<{ t: Date }>('SELECT clock_timestamp() AS t');
    const r = viaWorkflow
      ? await wf.submit(c, { n }, { tx: conn, debounce })
      : await c.submit(wf, { n }, { tx: conn, debounce });
    await conn.query(
      'INSERT INTO debounce_log (n, submitted_at, run_id, debounced) VALUES ($1, $2, $3, $4)',
      [n, rows[0]?.t, r.runId, r.debounced],
    );
    await conn.query('COMMIT');
    return r;
  } catch (err) {
    await conn.query('ROLLBACK').catch(() => {});
    throw err;
  } finally {
    conn.release();
  }
}

describe('debounce', () => {
  it('50 concurrent submits from 5 clients make one run with the last committed input, started delayMs after the last', async () => {
    const delayMs = 2_500;
    const results = await Promise.all(
      Array.from({ length: 50 }, (_, n) =>
        loggedSubmit(clients[n % 5] as Client, Burst, n, { key: 'user-7', delayMs }, n % 2 === 0),
      ),
    );

    const runs = await runsOf('debounce_burst');
    expect(runs).toHaveLength(1);
    const run = runs[0] as RunRow;
    // Every caller learned which run absorbed its submit; exactly one created it.
    expect(new Set(results.map((r) => r.runId))).toEqual(new Set([run.id]));
    expect(results.filter((r) => !r.debounced)).toHaveLength(1);

    const { rows: log } = await db.pool.query<{
      seq: string;
      n: number;
      submitted_at: Date;
      run_id: string;
      debounced: boolean;
    }>('SELECT * FROM debounce_log ORDER BY seq');
    expect(log).toHaveLength(50);
    // The first committed created the run; the last committed input is the run's.
    expect(log[0]?.debounced).toBe(false);
    const last = log[log.length - 1] as (typeof log)[number];
    expect(run.input).toEqual({ n: last.n });
    const lastSubmit = Math.max(...log.map((l) => l.submitted_at.getTime()));

    const done = await client.waitForRun(run.id, { timeoutMs: 20_000, pollMs: 50 });
    expect(done.state).toBe('completed');
    const step = done.steps[0];
    expect(step?.output).toEqual({ n: last.n });
    expect(step?.attempt).toBe(1);
    // Database timestamps: not started before delayMs after the last submit.
    expect(step?.startedAt?.getTime()).toBeGreaterThanOrEqual(lastSubmit + delayMs);
    expect((await runsOf('debounce_burst')).length).toBe(1);
  });

  it('maxDelayMs caps the wait: submits every 100 ms past the cap, the run starts by created_at + maxDelayMs', async () => {
    const window = { key: 'k', delayMs: 1_000, maxDelayMs: 2_000 };
    const results: DebouncedSubmitResult[] = [];
    const until = Date.now() + 3_500;
    for (let n = 0; Date.now() < until; n++) {
      results.push(await Capped.submit(client, { n }, { debounce: window }));
      await new Promise((r) => setTimeout(r, 100));
    }
    const runs = await runsOf('debounce_capped');
    // The first run started at its cap while submits went on; they then made one follow-up.
    expect(runs).toHaveLength(2);
    const [first, second] = runs as [RunRow, RunRow];
    const ids = results.map((r) => r.runId);
    const cut = ids.indexOf(second.id);
    expect(cut).toBeGreaterThan(5);
    expect(ids.slice(0, cut).every((id) => id === first.id)).toBe(true);
    expect(ids.slice(cut).every((id) => id === second.id)).toBe(true);
    expect(results.map((r, i) => r.debounced === (i !== 0 && i !== cut))).not.toContain(false);
    // Each run has the last input it absorbed (these submits are sequential).
    expect(first.input).toEqual({ n: cut - 1 });
    expect(second.input).toEqual({ n: results.length - 1 });

    const done = await client.waitForRun(first.id, { timeoutMs: 10_000, pollMs: 50 });
    const step = done.steps[0];
    const cap = first.created_at.getTime() + window.maxDelayMs;
    expect(step?.scheduledAt.getTime()).toBeLessThanOrEqual(cap);
    expect(step?.startedAt?.getTime()).toBeGreaterThanOrEqual(step?.scheduledAt.getTime() ?? 0);
    // Started by the cap (a worker's claim latency aside), long before the submits stopped.
    expect(step?.startedAt?.getTime()).toBeLessThan(cap + 1_000);
    expect(second.debounce_key).toBe('k');
    expect(first.debounce_key).toBeNull();
    const next = await client.waitForRun(second.id, { timeoutMs: 10_000, pollMs: 50 });
    expect(next.state).toBe('completed');
    expect(next.steps[0]?.output).toEqual({ n: results.length - 1 });
  });

  it('10 concurrent submits while the run is running make exactly one follow-up run', async () => {
    const window = { key: 'busy', delayMs: 0 };
    const first = await During.submit(client, { n: 0, hold: true }, { debounce: window });
    expect(first.debounced).toBe(false);
    await waitForState(first.runId, 'running');

    const results = await Promise.all(
      Array.from({ length: 10 }, (_, i) =>
        (clients[i % 5] as Client).submit(
          During,
          { n: i + 1, hold: true },
          { debounce: { key: 'busy', delayMs: 60_000 } },
        ),
      ),
    );
    const runs = await runsOf('debounce_during');
    expect(runs).toHaveLength(2);
    const [r1, r2] = runs as [RunRow, RunRow];
    expect(r1.id).toBe(first.runId);
    expect(new Set(results.map((r) => r.runId))).toEqual(new Set([r2.id]));
    expect(results.filter((r) => !r.debounced)).toHaveLength(1);
    // The started run kept its input and gave its key to the follow-up.
    expect(r1.input).toEqual({ n: 0, hold: true });
    expect(r1.debounce_key).toBeNull();
    expect(r2.debounce_key).toBe('busy');
    expect((await root(r2.id)).state).toBe('scheduled');
    expect((await root(r1.id)).state).toBe('running');
    await client.cancel(r2.id);
  });

  it('10 concurrent submits after the run completed make exactly one new run', async () => {
    const first = await Done.submit(client, { n: 0 }, { debounce: { key: 'd', delayMs: 0 } });
    expect((await client.waitForRun(first.runId, { timeoutMs: 10_000, pollMs: 50 })).state).toBe(
      'completed',
    );
    const results = await Promise.all(
      Array.from({ length: 10 }, (_, i) =>
        (clients[i % 5] as Client).submit(
          Done,
          { n: i + 1 },
          { debounce: { key: 'd', delayMs: 300 } },
        ),
      ),
    );
    const runs = await runsOf('debounce_done');
    expect(runs).toHaveLength(2);
    const r2 = (runs[1] as RunRow).id;
    expect(results.every((r) => r.runId === r2)).toBe(true);
    expect(results.filter((r) => !r.debounced)).toHaveLength(1);
    expect((await client.waitForRun(r2, { timeoutMs: 10_000, pollMs: 50 })).state).toBe(
      'completed',
    );
  });

  it('a submitter that waited on a run whose key was taken off joins the follow-up (READ COMMITTED)', async () => {
    const first = await Race.submit(
      client,
      { n: 0, hold: true },
      { debounce: { key: 'r', delayMs: 0 } },
    );
    await waitForState(first.runId, 'running');

    // A holds the started run's lock: it takes the key off and inserts the follow-up, uncommitted.
    const a = await client.pool.connect();
    try {
      await a.query('BEGIN');
      const fromA = await Race.submit(
        client,
        { n: 1 },
        { tx: a, debounce: { key: 'r', delayMs: 60_000 } },
      );
      expect(fromA.debounced).toBe(false);
      // B and C wait on the started run's row lock (or the follow-up's index entry).
      const others = [1, 2].map((i) =>
        (clients[i] as Client).submit(
          Race,
          { n: 1 + i },
          { debounce: { key: 'r', delayMs: 60_000 } },
        ),
      );
      await lockWaiters(2);
      await a.query('COMMIT');
      const [b, c] = await Promise.all(others);
      // Re-evaluated after A's commit: the started run no longer matches, the follow-up is
      // found on the next round, and both join it.
      expect(b).toEqual({ runId: fromA.runId, debounced: true });
      expect(c).toEqual({ runId: fromA.runId, debounced: true });
    } finally {
      a.release();
    }
    const runs = await runsOf('debounce_race');
    expect(runs.map((r) => r.id)).toEqual([first.runId, runs[1]?.id]);
    expect(runs).toHaveLength(2);
    expect([2, 3]).toContain((runs[1] as RunRow).input.n);
    await client.cancel((runs[1] as RunRow).id);
  });

  it('a submitter that waited on a creator that rolled back creates the run itself', async () => {
    const a = await client.pool.connect();
    let created: string;
    try {
      await a.query('BEGIN');
      created = (
        await Race.submit(client, { n: 10 }, { tx: a, debounce: { key: 'rb', delayMs: 60_000 } })
      ).runId;
      const b = clients[1]?.submit(Race, { n: 11 }, { debounce: { key: 'rb', delayMs: 60_000 } });
      await lockWaiters(1);
      await a.query('ROLLBACK');
      const got = await b;
      expect(got?.debounced).toBe(false);
      expect(got?.runId).not.toBe(created);
      const mine = (await runsOf('debounce_race')).filter((r) => r.debounce_key === 'rb');
      expect(mine.map((r) => r.id)).toEqual([got?.runId]);
      expect(mine[0]?.input).toEqual({ n: 11 });
      await client.cancel(got?.runId as string);
    } finally {
      a.release();
    }
  });

  it('keys and workflows are independent', async () => {
    const submits = [
      ...[1, 2, 3].map(
        (n) => () => KeysA.submit(client, { n }, { debounce: { key: 'x', delayMs: 60_000 } }),
      ),
      ...[4, 5].map(
        (n) => () => KeysA.submit(client, { n }, { debounce: { key: 'y', delayMs: 60_000 } }),
      ),
      ...[6, 7].map(
        (n) => () => KeysB.submit(client, { n }, { debounce: { key: 'x', delayMs: 60_000 } }),
      ),
    ];
    const results = await Promise.all(submits.map((s) => s()));
    const ax = new Set(results.slice(0, 3).map((r) => r.runId));
    const ay = new Set(results.slice(3, 5).map((r) => r.runId));
    const bx = new Set(results.slice(5).map((r) => r.runId));
    expect([ax.size, ay.size, bx.size]).toEqual([1, 1, 1]);
    expect(new Set([...ax, ...ay, ...bx]).size).toBe(3);
    expect(await runsOf('debounce_keys_a')).toHaveLength(2);
    expect(await runsOf('debounce_keys_b')).toHaveLength(1);
    // A plain submit of the same workflow is not debounced and takes no key.
    const plain = await KeysA.submit(client, { n: 8 }, { delayMs: 60_000 });
    expect(plain).toEqual({ runId: plain.runId });
    expect(await runsOf('debounce_keys_a')).toHaveLength(3);
  });

  it('a rolled-back caller transaction leaves nothing: neither a new run nor an absorbed input', async () => {
    const window = { key: 'tx', delayMs: 60_000 };
    const conn = await client.pool.connect();
    try {
      await conn.query('BEGIN');
      const r = await client.submit(Rollback, { n: 1 }, { tx: conn, debounce: window });
      expect(r.debounced).toBe(false);
      await conn.query('ROLLBACK');
      await expect(client.getRun(r.runId)).rejects.toBeInstanceOf(RunNotFoundError);
      expect(await runsOf('debounce_rollback')).toHaveLength(0);

      const kept = await client.submit(Rollback, { n: 2 }, { debounce: window });
      const before = await root(kept.runId);
      await conn.query('BEGIN');
      const joined = await Rollback.submit(client, { n: 3 }, { tx: conn, debounce: window });
      expect(joined).toEqual({ runId: kept.runId, debounced: true });
      await conn.query('ROLLBACK');
      const runs = await runsOf('debounce_rollback');
      expect(runs.map((x) => [x.id, x.input])).toEqual([[kept.runId, { n: 2 }]]);
      expect((await root(kept.runId)).scheduled_at).toEqual(before.scheduled_at);
    } finally {
      conn.release();
    }
  });

  it('every submit form answers debounced, with and without a transaction', async () => {
    const window = { key: 'forms', delayMs: 60_000 };
    const a = await client.submit(Forms, { n: 1 }, { debounce: window });
    const b = await Forms.submit(clients[1] as Client, { n: 2 }, { debounce: window });
    const third = clients[2] as Client;
    const conn = await third.pool.connect();
    let c: DebouncedSubmitResult;
    let d: DebouncedSubmitResult;
    try {
      await conn.query('BEGIN');
      c = await third.submit(Forms, { n: 3 }, { tx: conn, debounce: window });
      d = await Forms.submit(third, { n: 4 }, { tx: conn, debounce: window });
      await conn.query('COMMIT');
    } finally {
      conn.release();
    }
    expect([a, b, c, d].map((r) => r.debounced)).toEqual([false, true, true, true]);
    expect(new Set([a, b, c, d].map((r) => r.runId)).size).toBe(1);
    const run = await client.getRun(a.runId);
    expect(run.input).toEqual({ n: 4 });
    expect(run.submitKey).toBeNull();
    expect(run.steps[0]?.state).toBe('scheduled');
  });

  it('pushes every root of the run, each keeping its own node timer', async () => {
    const window = { key: 'roots', delayMs: 5_000 };
    const first = await Roots.submit(client, { n: 1 }, { debounce: window });
    const { rows } = await db.pool.query<{ t: Date }>('SELECT clock_timestamp() AS t');
    const t0 = (rows[0] as { t: Date }).t.getTime();
    const again = await Roots.submit(client, { n: 2 }, { debounce: window });
    expect(again).toEqual({ runId: first.runId, debounced: true });
    const a = await root(first.runId, 'a');
    const b = await root(first.runId, 'b');
    const c = await root(first.runId, 'c');
    expect(a.state).toBe('scheduled');
    expect(a.scheduled_at.getTime()).toBeGreaterThanOrEqual(t0 + 5_000);
    expect(b.scheduled_at.getTime() - a.scheduled_at.getTime()).toBe(500);
    expect(c.state).toBe('pending');
    await client.cancel(first.runId);
  });

  it('a wait node after the root still waits for its signal in a debounced run', async () => {
    const window = { key: 'wait', delayMs: 200 };
    const a = await Approval.submit(client, { n: 1 }, { debounce: window });
    const b = await Approval.submit(client, { n: 2 }, { debounce: window });
    expect(b).toEqual({ runId: a.runId, debounced: true });
    const deadline = Date.now() + 10_000;
    for (;;) {
      const run = await client.getRun(a.runId);
      const first = run.steps.find((x) => x.node === 'first');
      const approval = run.steps.find((x) => x.node === 'approval');
      // Reached once its root completed, the wait node parks (`scheduled`) for its signal.
      expect(approval?.state).not.toBe('completed');
      if (first?.state === 'completed' && approval?.state === 'scheduled') {
        expect(first.output).toEqual({ n: 2 });
        break;
      }
      if (Date.now() > deadline) throw new Error('the root never completed');
      await new Promise((r) => setTimeout(r, 20));
    }
    await client.signal(a.runId, 'approved', { by: 'alice' });
    const done = await client.waitForRun(a.runId, { timeoutMs: 10_000, pollMs: 50 });
    expect(done.state).toBe('completed');
    expect(done.steps.find((x) => x.node === 'approval')?.output).toEqual({ by: 'alice' });
  });

  it('refuses bad debounce options with InputValidationError, writing nothing', async () => {
    const before = await countRuns();
    const ok = { key: 'k', delayMs: 100 };
    const bad: unknown[] = [
      { delayMs: 100 },
      { key: '', delayMs: 100 },
      { key: 42, delayMs: 100 },
      { key: null, delayMs: 100 },
      { key: 'x'.repeat(4097), delayMs: 100 },
      { key: 'a\u0000b', delayMs: 100 },
      { key: '\ud800', delayMs: 100 },
      { key: 'k' },
      { key: 'k', delayMs: -1 },
      { key: 'k', delayMs: Number.NaN },
      { key: 'k', delayMs: Number.POSITIVE_INFINITY },
      { key: 'k', delayMs: '100' },
      { key: 'k', delayMs: MAX_DELAY_MS + 1 },
      { key: 'k', delayMs: 100, maxDelayMs: -1 },
      { key: 'k', delayMs: 100, maxDelayMs: Number.NaN },
      { key: 'k', delayMs: 100, maxDelayMs: MAX_DELAY_MS + 1 },
      { key: 'k', delayMs: 100, maxDelayMs: '200' },
      { key: 'k', delayMs: 100, maxDelayMs: 99 },
      null,
      'k',
      [],
    ];
    for (const debounce of bad) {
      // biome-ignore lint/suspicious/noExplicitAny: the bad shapes a JavaScript caller can pass
      const p = client.submit(Bad, { n: 1 }, { debounce } as any);
      await expect(p, JSON.stringify(debounce)).rejects.toBeInstanceOf(InputValidationError);
    }
    const misuse: (() => Promise<unknown>)[] = [
      () => client.submit(Bad, { n: 1 }, { debounce: ok, delayMs: 100 }),
      () => client.submit(Bad, { n: 1 }, { debounce: ok, runAt: new Date() }),
      () => client.submitOnce(Bad, 'once', { n: 1 }, { debounce: ok }),
      () => Bad.submitOnce(client, 'once', { n: 1 }, { debounce: ok }),
      () => client.submitMany(Bad, [{ n: 1 }], { debounce: ok }),
      // A root wait node's time is its signal's, not the debounce's.
      () => client.submit(RootWait, {}, { debounce: ok }),
      // The run input is still validated.
      // biome-ignore lint/suspicious/noExplicitAny: an input the schema refuses
      () => client.submit(Bad, { n: 'one' } as any, { debounce: ok }),
    ];
    for (const call of misuse) await expect(call()).rejects.toBeInstanceOf(InputValidationError);
    const err = await client
      .submit(Bad, { n: 1 }, { debounce: { key: 'k', delayMs: 100, maxDelayMs: 99 } })
      .catch((e: unknown) => e);
    expect((err as InputValidationError).issues[0]?.path).toEqual(['debounce', 'maxDelayMs']);
    expect(await countRuns()).toBe(before);
    expect(await runsOf('debounce_bad')).toHaveLength(0);
  });
});

/** Waits until run `runId`'s first step is in `state`. */
async function waitForState(runId: string, state: string): Promise<void> {
  const deadline = Date.now() + 10_000;
  while ((await client.getRun(runId)).steps[0]?.state !== state) {
    if (Date.now() > deadline) throw new Error(`run ${runId} never reached ${state}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
