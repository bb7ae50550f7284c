/**
 * `submitMany` (issue 8, bulk submit): the runs and steps of many inputs in one statement per
 * chunk of 1,000; every input validated first, as `submit` does, and all or nothing: a bad input
 * (named by its index), a failing chunk or a caller's rolled-back transaction leaves no row.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import { Client, InputValidationError, newAction, newWorkflow, Worker } from '../src/index.js';
import { createTestDb, type TestDb } from './support/db.js';

const step = newAction('many_step', async (ctx, input: { n: number }) => {
  if (ctx.node === 'a') return { n: input.n };
  const a = ctx.upstream<{ n: number }>('a');
  if (ctx.node === 'b') return { n: a.n + 1 };
  const b = ctx.upstream<{ n: number }>('b');
  return { sum: a.n + b.n };
});
/** 3 nodes: `a`, then `b`, then the join `c` after both. */
const Dag = newWorkflow<{ n: number }>('many_dag', {
  nodes: {
    a: { action: step },
    b: { action: step, after: ['a'] },
    c: { action: step, after: ['a', 'b'] },
  },
});

const charge = newAction('many_charge', async () => null, {
  input: z.object({ amount: z.number().int().positive() }),
});
const Order = newWorkflow('many_order', {
  input: z.object({ orderId: z.string().min(1), amount: z.number().int() }),
  nodes: { charge: { action: charge, input: (run) => ({ amount: run.amount }) } },
});
const Loose = newWorkflow<Record<string, unknown>>('many_loose', {
  nodes: { only: { action: newAction('many_noop', async () => null) } },
});

describe('submitMany', () => {
  let db: TestDb;
  let client: Client;

  beforeAll(async () => {
    db = await createTestDb();
    client = new Client({ connectionString: db.url, poolSize: 4 });
  });

  afterAll(async () => {
    await client?.close();
    await db?.drop();
  });

  async function counts(workflow: string) {
    const { rows } = await db.pool.query<{ runs: number; steps: number }>(
      `SELECT (SELECT count(*)::int FROM cyclone.cyclone_runs WHERE workflow = $1) AS runs,
              (SELECT count(*)::int FROM cyclone.cyclone_steps WHERE workflow = $1) AS steps`,
      [workflow],
    );
    return rows[0];
  }

  it('2,500 runs of a 3-node DAG across three chunks: every row as submit writes it, and a worker completes them all', async () => {
    const inputs = Array.from({ length: 2_500 }, (_, n) => ({ n }));
    const query = vi.spyOn(client.pool, 'query');
    const connect = vi.spyOn(client.pool, 'connect');
    const { runIds } = await client.submitMany(Dag, inputs);
    // Several chunks and no caller tx: one transaction on one pool connection.
    expect(connect).toHaveBeenCalledTimes(1);
    expect(query).not.toHaveBeenCalled();
    query.mockRestore();
    connect.mockRestore();

    expect(runIds).toHaveLength(2_500);
    expect(new Set(runIds).size).toBe(2_500);
    expect(await counts('many_dag')).toEqual({ runs: 2_500, steps: 7_500 });
    // runIds[i] is the run of inputs[i].
    const mismatched = await db.pool.query(
      `SELECT 1 FROM unnest($1::uuid[]) WITH ORDINALITY AS x(id, i)
       LEFT JOIN cyclone.cyclone_runs r ON r.id = x.id
       WHERE r.id IS NULL OR (r.input->>'n')::int <> x.i - 1 OR r.submit_key IS NOT NULL
         OR r.state <> 'running' OR r.steps_remaining <> 3 OR r.steps_active <> 1`,
      [runIds],
    );
    expect(mismatched.rows).toHaveLength(0);
    // The same steps, state and counters as `submit` writes for one run.
    const one = await client.getRun((await client.submit(Dag, { n: -1 })).runId);
    const many = await client.getRun(runIds[1_234] as string);
    const shape = (r: typeof one) =>
      r.steps.map((s) => [s.node, s.action, s.state, s.depsRemaining, s.maxAttempts, s.attempt]);
    expect(shape(many)).toEqual(shape(one));
    expect(shape(many)).toEqual([
      ['a', 'many_step', 'available', 0, 25, 0],
      ['b', 'many_step', 'pending', 1, 25, 0],
      ['c', 'many_step', 'pending', 2, 25, 0],
    ]);
    const arrays = await db.pool.query(
      `SELECT DISTINCT node, downstream, ancestors FROM cyclone.cyclone_steps
       WHERE workflow = 'many_dag' ORDER BY node`,
    );
    expect(arrays.rows.map((r) => [r.node, r.downstream, r.ancestors])).toEqual([
      ['a', ['b', 'c'], []],
      ['b', ['c'], ['a']],
      ['c', [], ['a', 'b']],
    ]);
    const hashes = await db.pool.query(
      `SELECT count(DISTINCT input_hash)::int AS n FROM cyclone.cyclone_runs
       WHERE workflow = 'many_dag'`,
    );
    expect(hashes.rows[0].n).toBe(2_501);

    const worker = new Worker({
      client,
      workflows: [Dag],
      concurrency: 50,
      pollIntervalMs: 100,
    });
    await worker.start();
    try {
      const done = async () => {
        const { rows } = await db.pool.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM cyclone.cyclone_runs
           WHERE workflow = 'many_dag' AND state = 'completed'`,
        );
        return rows[0]?.n === 2_501;
      };
      const deadline = Date.now() + 100_000;
      while (!(await done())) {
        if (Date.now() > deadline) throw new Error('runs not completed in 100 s');
        await new Promise((r) => setTimeout(r, 200));
      }
    } finally {
      await worker.stop({ graceMs: 1_000 });
    }
    const outputs = await db.pool.query(
      `SELECT count(*)::int AS n FROM cyclone.cyclone_steps s
       JOIN cyclone.cyclone_runs r ON r.id = s.run_id
       WHERE s.workflow = 'many_dag' AND s.node = 'c' AND s.attempt = 1
         AND (s.output->>'sum')::int = 2 * (r.input->>'n')::int + 1`,
    );
    expect(outputs.rows[0].n).toBe(2_501);
  }, 120_000);

  it('an invalid input at index k: InputValidationError naming k, and no row at all', async () => {
    const good = (i: number) => ({ orderId: `o-${i}`, amount: 10 });
    const before = await counts('many_order');
    for (const [k, bad, node] of [
      [0, { orderId: '', amount: 10 }, undefined],
      [1_700, { orderId: 'o', amount: 'ten' }, undefined],
      // Valid for the workflow, but the root's mapped input fails its action's schema.
      [2_999, { orderId: 'o', amount: -5 }, 'charge'],
    ] as const) {
      const inputs = Array.from({ length: 3_000 }, (_, i) => (i === k ? bad : good(i)));
      const err = await client
        .submitMany(Order, inputs as { orderId: string; amount: number }[])
        .catch((e: unknown) => e);
      expect(err).toBeInstanceOf(InputValidationError);
      const e = err as InputValidationError;
      expect(e.index).toBe(k);
      expect(e.node).toBe(node);
      expect(e.message).toContain(`at index ${k}`);
      // The same issues as `submit` reports for that input.
      const single = (await client.submit(Order, bad as never).catch((x: unknown) => x)) as
        | InputValidationError
        | undefined;
      expect(single).toBeInstanceOf(InputValidationError);
      expect(e.issues).toEqual(single?.issues);
      expect(single?.index).toBeUndefined();
    }
    // The first bad input is the one named.
    const two = await client
      .submitMany(Order, [good(0), { orderId: '', amount: 1 }, { orderId: '', amount: 1 }])
      .catch((e: unknown) => e);
    expect((two as InputValidationError).index).toBe(1);
    expect(await counts('many_order')).toEqual(before);
  });

  it('a payload that is not storable JSON or is over maxPayloadBytes: the same error as submit, nothing written', async () => {
    const small = new Client({ connectionString: db.url, poolSize: 1, maxPayloadBytes: 100 });
    try {
      for (const [c, bad] of [
        [client, { f: () => 1 }],
        [client, { big: 10n }],
        [client, { s: 'nul\u0000' }],
        [small, { s: 'x'.repeat(200) }],
      ] as const) {
        const inputs: Record<string, unknown>[] = [{ ok: 1 }, { ok: 2 }, bad, { ok: 3 }];
        const err = await c.submitMany(Loose, inputs).catch((e: unknown) => e);
        const single = await c.submit(Loose, bad).catch((e: unknown) => e);
        expect(err).toBeInstanceOf(InputValidationError);
        expect(single).toBeInstanceOf(InputValidationError);
        const e = err as InputValidationError;
        expect(e.index).toBe(2);
        expect(e.issues[0]?.code).toBe('payload');
        expect(e.issues).toEqual((single as InputValidationError).issues);
      }
    } finally {
      await small.close();
    }
    expect(await counts('many_loose')).toEqual({ runs: 0, steps: 0 });
  });

  it('a chunk that fails in the database rolls back the chunks before it', async () => {
    await db.pool.query(`
      CREATE FUNCTION public.refuse_boom() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF NEW.input ? 'boom' THEN RAISE EXCEPTION 'boom refused'; END IF;
        RETURN NEW;
      END $$;
      CREATE TRIGGER refuse_boom BEFORE INSERT ON cyclone.cyclone_runs
        FOR EACH ROW EXECUTE FUNCTION public.refuse_boom();`);
    try {
      const inputs = Array.from({ length: 2_100 }, (_, i) => (i === 1_500 ? { boom: 1 } : { i }));
      await expect(client.submitMany(Loose, inputs)).rejects.toThrow(/boom refused/);
      expect(await counts('many_loose')).toEqual({ runs: 0, steps: 0 });
      // The connection went back to the pool clean: the next call works.
      const { runIds } = await client.submitMany(Loose, [{ i: 1 }]);
      expect(runIds).toHaveLength(1);
      await db.pool.query('DELETE FROM cyclone.cyclone_runs WHERE id = $1', [runIds[0]]);
    } finally {
      await db.pool.query('DROP TRIGGER refuse_boom ON cyclone.cyclone_runs');
    }
  });

  it("inside a caller's transaction: nothing after a rollback, every run after a commit", async () => {
    const inputs = Array.from({ length: 1_200 }, (_, i) => ({ i }));
    const c = await db.pool.connect();
    try {
      await c.query('BEGIN');
      const { runIds } = await client.submitMany(Loose, inputs, { tx: c });
      const inside = await c.query(
        'SELECT count(*)::int AS n FROM cyclone.cyclone_runs WHERE id = ANY($1)',
        [runIds],
      );
      expect(inside.rows[0].n).toBe(1_200);
      expect(await counts('many_loose')).toEqual({ runs: 0, steps: 0 });
      await c.query('ROLLBACK');
      expect(await counts('many_loose')).toEqual({ runs: 0, steps: 0 });

      await c.query('BEGIN');
      await client.submitMany(Loose, inputs, { tx: c });
      await c.query('COMMIT');
      expect(await counts('many_loose')).toEqual({ runs: 1_200, steps: 1_200 });
    } finally {
      c.release();
    }
    await db.pool.query(`DELETE FROM cyclone.cyclone_runs WHERE workflow = 'many_loose'`);
  });

  it('an empty array: no runs, and no query sent', async () => {
    const query = vi.spyOn(client.pool, 'query');
    const connect = vi.spyOn(client.pool, 'connect');
    const tx = { query: vi.fn() };
    try {
      expect(await client.submitMany(Loose, [])).toEqual({ runIds: [] });
      expect(await client.submitMany(Loose, [], { tx })).toEqual({ runIds: [] });
      expect(query).not.toHaveBeenCalled();
      expect(connect).not.toHaveBeenCalled();
      expect(tx.query).not.toHaveBeenCalled();
    } finally {
      query.mockRestore();
      connect.mockRestore();
    }
  });

  it('one chunk goes as one statement on the pool, prepared or not', async () => {
    const plain = new Client({ connectionString: db.url, poolSize: 1, preparedStatements: false });
    try {
      for (const c of [client, plain]) {
        const query = vi.spyOn(c.pool, 'query');
        const { runIds } = await c.submitMany(
          Loose,
          Array.from({ length: 1_000 }, (_, i) => ({ i })),
        );
        expect(runIds).toHaveLength(1_000);
        expect(query).toHaveBeenCalledTimes(1);
        const config = query.mock.calls[0]?.[0] as { name?: string };
        expect(config.name !== undefined).toBe(c === client);
        query.mockRestore();
      }
      expect(await counts('many_loose')).toEqual({ runs: 2_000, steps: 2_000 });
    } finally {
      await plain.close();
    }
  });
});
