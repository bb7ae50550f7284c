/**
 * Bad input everywhere: unknown ids, outputs and inputs that are not JSON, oversized payloads,
 * bad schema names and options, and the database connection killed while runs are in flight.
 */
import { randomUUID } from 'node:crypto';
import { ADMIN_URL, deferred, mapLimit, waitFor } from '@cyclone/testkit';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  Client,
  ConfigError,
  InputValidationError,
  NodeNotFoundError,
  newAction,
  newWorkflow,
  RunNotFoundError,
  Worker,
} from '../src/index.js';
import { createTestDb, type TestDb } from './support/db.js';

const noop = newAction('noop', async () => null);
const Simple = newWorkflow('simple', {
  nodes: { a: { action: noop }, b: { action: noop, after: ['a'] } },
});

type BadKind =
  | 'bigint'
  | 'function_in_array'
  | 'nan'
  | 'infinity'
  | 'circular'
  | 'map'
  | 'nul'
  | 'undefined_in_array'
  | 'too_big';
const badValue = (kind: BadKind): unknown => {
  switch (kind) {
    case 'bigint':
      return { total: 10n };
    case 'function_in_array':
      return { list: [1, () => 2, 3] };
    case 'nan':
      return { ratio: Number.NaN };
    case 'infinity':
      return { ratio: Number.POSITIVE_INFINITY };
    case 'circular': {
      const o: Record<string, unknown> = { a: 1 };
      o.self = o;
      return o;
    }
    case 'map':
      return { m: new Map([['a', 1]]) };
    case 'nul':
      return { s: 'a\u0000b' };
    case 'undefined_in_array':
      return [1, undefined, 3];
    case 'too_big':
      return { blob: 'x'.repeat(1_100_000) };
  }
};
const outputCalls = new Map<string, number>();
const badOutput = newAction(
  'bad_output',
  async (ctx, input: { kind: BadKind | 'undefined' }) => {
    outputCalls.set(ctx.runId, (outputCalls.get(ctx.runId) ?? 0) + 1);
    const tx = await ctx.completionTx();
    await tx.query('INSERT INTO effects (run_id, node, attempt) VALUES ($1, $2, $3)', [
      ctx.runId,
      ctx.node,
      ctx.attempt,
    ]);
    if (input.kind === 'undefined') return undefined;
    return badValue(input.kind);
  },
  { maxAttempts: 3, backoff: () => 0 },
);
const BadOutput = newWorkflow('bad_output', { nodes: { only: { action: badOutput } } });

// The chain run while connections are killed: each step writes once on its completionTx.
const work = newAction(
  'work',
  async (ctx) => {
    await new Promise((r) => setTimeout(r, 20 + Math.random() * 30));
    const tx = await ctx.completionTx();
    await tx.query('INSERT INTO chain_effects (run_id, node) VALUES ($1, $2)', [
      ctx.runId,
      ctx.node,
    ]);
    return { node: ctx.node };
  },
  { backoff: () => 0 },
);
const Chain = newWorkflow('chain', {
  nodes: {
    a: { action: work },
    b: { action: work, after: ['a'] },
    c: { action: work, after: ['b'] },
  },
});

// Holds its completionTx open (idle, checked out of the pool) while the test kills connections.
const holding = { inTx: deferred(), release: deferred() };
const holder = newAction(
  'holder',
  async (ctx) => {
    const tx = await ctx.completionTx();
    await tx.query('INSERT INTO chain_effects (run_id, node) VALUES ($1, $2)', [
      ctx.runId,
      ctx.node,
    ]);
    if (ctx.attempt === 1) {
      holding.inTx.resolve();
      await holding.release.promise;
    }
    return { attempt: ctx.attempt };
  },
  { backoff: () => 0 },
);
const Holder = newWorkflow('holder', { nodes: { only: { action: holder } } });

// Inputs mapped at run time that fail the action's schema, or whose mapper throws.
const mapCalls = { typed: 0 };
const produces = newAction('produces', async () => ({ n: 'not a number' }));
const typed = newAction(
  'typed',
  async (_ctx, input: { n: number }) => {
    mapCalls.typed++;
    return input;
  },
  { input: z.object({ n: z.number() }), maxAttempts: 5, backoff: () => 0 },
);
const MappedInput = newWorkflow('mapped_input', {
  nodes: {
    a: { action: produces },
    schema_fails: { action: typed, after: ['a'], input: (_run, up) => up.a },
    mapper_throws: {
      action: typed,
      after: ['a'],
      input: () => {
        throw new Error('mapper exploded');
      },
    },
  },
});

describe('bad input', () => {
  let db: TestDb;
  let client: Client;
  let worker: Worker;

  beforeAll(async () => {
    db = await createTestDb();
    await db.pool.query(`
      CREATE TABLE effects (run_id uuid NOT NULL, node text NOT NULL, attempt int NOT NULL);
      CREATE TABLE chain_effects (run_id uuid NOT NULL, node text NOT NULL);
    `);
    client = new Client({ connectionString: db.url, poolSize: 4 });
    worker = new Worker({
      client,
      workflows: [BadOutput, Chain, Holder, MappedInput],
      concurrency: 10,
      poolSize: 14,
      pollIntervalMs: 50,
      leaseMs: 2_000,
      sweepIntervalMs: 250,
    });
    await worker.start();
  });

  afterAll(async () => {
    holding.release.resolve();
    await worker?.stop({ graceMs: 1_000 });
    await client?.close();
    await db?.drop();
  });

  async function counts() {
    const { rows } = await db.pool.query<{ runs: number; steps: number }>(
      `SELECT (SELECT count(*)::int FROM cyclone.cyclone_runs) AS runs,
              (SELECT count(*)::int FROM cyclone.cyclone_steps) AS steps`,
    );
    return rows[0];
  }

  describe('unknown ids', () => {
    const ids = [randomUUID(), 'not-a-uuid', '', "'; DROP TABLE cyclone.cyclone_runs; --", '123'];

    it.each(ids)(
      '%j → RunNotFoundError from getRun, retry, retryAll, cancel, waitForRun',
      async (id) => {
        const calls: [string, () => Promise<unknown>][] = [
          ['getRun', () => client.getRun(id)],
          ['retry', () => client.retry(id, 'a')],
          ['retryAll', () => client.retryAll(id)],
          ['cancel', () => client.cancel(id)],
          ['waitForRun', () => client.waitForRun(id, { timeoutMs: 1_000 })],
        ];
        for (const [name, call] of calls) {
          const err = await call().catch((e: unknown) => e);
          expect(err, name).toBeInstanceOf(RunNotFoundError);
          expect((err as RunNotFoundError).code).toBe('RUN_NOT_FOUND');
        }
      },
    );

    it('an unknown node of a real run → NodeNotFoundError', async () => {
      const { runId } = await client.submit(Simple, {});
      for (const node of ['nope', '', 'A', "a' OR '1'='1"]) {
        const err = await client.retry(runId, node).catch((e: unknown) => e);
        expect(err, node).toBeInstanceOf(NodeNotFoundError);
        expect(err).toMatchObject({ code: 'NODE_NOT_FOUND', runId, node });
      }
      await client.cancel(runId);
    });
  });

  describe('outputs that are not JSON', () => {
    it.each([
      ['bigint', /BigInt/],
      ['function_in_array', /function/],
      ['nan', /NaN/],
      ['infinity', /Infinity/],
      ['circular', /circular/i],
      ['map', /Map/],
      ['nul', /NUL|U\+0000/],
      ['undefined_in_array', /undefined/],
      ['too_big', /limit|bytes/i],
    ] as [BadKind, RegExp][])(
      '%s → the step is discarded (output_invalid), nothing stored, completionTx rolled back',
      async (kind, message) => {
        const { runId } = await client.submit(BadOutput, { kind });
        const run = await client.waitForRun(runId, { timeoutMs: 20_000 });
        expect(run.state).toBe('failed');
        const step = run.steps[0];
        expect(step?.state).toBe('discarded');
        expect(step?.output).toBeNull();
        expect(step?.errors.length).toBeGreaterThan(0);
        for (const e of step?.errors ?? []) {
          expect(e.kind).toBe('output_invalid');
          expect(e.message).toMatch(message);
          expect(e.message).toMatch(/output/i);
        }
        expect(step?.attempt).toBe(outputCalls.get(runId));
        const { rows } = await db.pool.query('SELECT 1 FROM effects WHERE run_id = $1', [runId]);
        expect(rows).toHaveLength(0);
      },
    );

    it('a handler that returns nothing completes with a null output', async () => {
      const { runId } = await client.submit(BadOutput, { kind: 'undefined' });
      const run = await client.waitForRun(runId, { timeoutMs: 20_000 });
      expect(run.state).toBe('completed');
      expect(run.steps[0]).toMatchObject({ state: 'completed', output: null, errors: [] });
      const { rows } = await db.pool.query('SELECT 1 FROM effects WHERE run_id = $1', [runId]);
      expect(rows).toHaveLength(1);
    });
  });

  describe('node inputs that fail at run time', () => {
    it("a mapped input failing the action's schema, or a throwing mapper → discarded at once (input_invalid)", async () => {
      const { runId } = await client.submit(MappedInput, {});
      const run = await client.waitForRun(runId, { timeoutMs: 20_000 });
      expect(run.state).toBe('failed');
      const step = (n: string) => run.steps.find((s) => s.node === n);
      expect(step('a')?.state).toBe('completed');
      for (const [node, message] of [
        ['schema_fails', /\bn\b|number/],
        ['mapper_throws', /mapper exploded/],
      ] as const) {
        expect(step(node), node).toMatchObject({ state: 'discarded', attempt: 1, output: null });
        expect(step(node)?.errors).toHaveLength(1);
        expect(step(node)?.errors[0]?.kind).toBe('input_invalid');
        expect(step(node)?.errors[0]?.message).toMatch(message);
      }
      // The handler never ran with a bad input.
      expect(mapCalls.typed).toBe(0);
    });
  });

  describe('inputs that are not JSON, or too large', () => {
    it.each([
      ['a BigInt', { n: 1n }],
      ['NaN', { n: Number.NaN }],
      ['a function', { f: () => 1 }],
      [
        'a circular object',
        (() => {
          const o: Record<string, unknown> = {};
          o.o = o;
          return o;
        })(),
      ],
      ['undefined', undefined],
      ['a NUL character', { s: '\u0000' }],
      ['a Date-less class instance', { m: new Set([1]) }],
    ])('%s → InputValidationError at submit, nothing written', async (_what, input) => {
      const before = await counts();
      const err = await client.submit(Simple, input).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(InputValidationError);
      expect((err as InputValidationError).issues.length).toBeGreaterThan(0);
      expect(await counts()).toEqual(before);
    });

    it('an input over maxPayloadBytes → InputValidationError, nothing written; under it works', async () => {
      const small = new Client({ connectionString: db.url, poolSize: 1, maxPayloadBytes: 1_000 });
      try {
        const before = await counts();
        const err = await small
          .submit(Simple, { blob: 'x'.repeat(2_000) })
          .catch((e: unknown) => e);
        expect(err).toBeInstanceOf(InputValidationError);
        expect((err as InputValidationError).message).toMatch(/1000|limit/);
        // Multi-byte characters count as bytes: 400 × 3 bytes is over 1,000.
        await expect(small.submit(Simple, { s: '注'.repeat(400) })).rejects.toBeInstanceOf(
          InputValidationError,
        );
        await expect(
          small.submitOnce(Simple, 'big', { blob: 'x'.repeat(2_000) }),
        ).rejects.toBeInstanceOf(InputValidationError);
        expect(await counts()).toEqual(before);
        const ok = await small.submit(Simple, { blob: 'x'.repeat(900) });
        expect((await small.getRun(ok.runId)).input).toEqual({ blob: 'x'.repeat(900) });
        await small.cancel(ok.runId);
      } finally {
        await small.close();
      }
    });
  });

  describe('configuration', () => {
    it.each([
      'bad-name',
      'Upper',
      '1abc',
      'a b',
      'x"; DROP SCHEMA cyclone; --',
      '',
      'a'.repeat(64),
    ])('schema name %j → ConfigError', (schema) => {
      expect(() => new Client({ connectionString: db.url, schema })).toThrow(ConfigError);
    });

    it('bad worker options → ConfigError', async () => {
      expect(() => new Worker({ client, workflows: [] })).toThrow(ConfigError);
      expect(() => new Worker({ client, workflows: [Simple], concurrency: 0 })).toThrow(
        ConfigError,
      );
      expect(() => new Worker({ client, workflows: [Simple], leaseMs: -1 })).toThrow(ConfigError);
      expect(() => new Worker({ client, workflows: [Simple, Simple] })).toThrow(ConfigError);
    });
  });

  it('connections killed while 50 runs are in flight: the worker keeps going, every run completes once', async () => {
    // One handler sits in its completionTx, idle, when the connections die.
    const { runId: holderRun } = await client.submit(Holder, {});
    await holding.inTx.promise;
    const runIds = await mapLimit(
      Array.from({ length: 50 }, (_, i) => i),
      4,
      async (i) => (await client.submit(Chain, { i })).runId,
    );
    // A killed connection must not surface as an uncaught 'error' event: in a worker process that
    // is a crash. (Vitest reports these too; this names them in the test.)
    const uncaught: string[] = [];
    const onUncaught = (err: unknown) => uncaught.push(String(err));
    process.on('uncaughtException', onUncaught);
    const killer = new pg.Client({ connectionString: ADMIN_URL });
    await killer.connect();
    const killed: number[] = [];
    try {
      for (let i = 0; i < 4; i++) {
        await new Promise((r) => setTimeout(r, 150));
        // Each round kills what the worker has reconnected since the last (its claim loop backs
        // off a few hundred ms after a failed statement): wait until it has something open.
        for (let waited = 0; waited < 5_000; waited += 20) {
          const { rows: open } = await killer.query(
            `SELECT count(*)::int AS n FROM pg_stat_activity
             WHERE datname = $1 AND pid <> pg_backend_pid()`,
            [db.name],
          );
          if ((open[0]?.n ?? 0) > 0) break;
          await new Promise((r) => setTimeout(r, 20));
        }
        const { rows } = await killer.query(
          `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
           WHERE datname = $1 AND pid <> pg_backend_pid()`,
          [db.name],
        );
        killed.push(rows.length);
      }
    } finally {
      await killer.end();
    }
    expect(killed.every((n) => n > 0)).toBe(true);
    holding.release.resolve();

    await waitFor(
      'every run to finish',
      async () => {
        const { rows } = await db.pool.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM cyclone.cyclone_runs WHERE id = ANY($1::uuid[]) AND state <> 'running'`,
          [runIds],
        );
        return rows[0]?.n === runIds.length;
      },
      { timeoutMs: 60_000, intervalMs: 100 },
    );
    const { rows: runs } = await db.pool.query<{ state: string; n: number }>(
      `SELECT state, count(*)::int AS n FROM cyclone.cyclone_runs WHERE id = ANY($1::uuid[]) GROUP BY state`,
      [runIds],
    );
    expect(runs).toEqual([{ state: 'completed', n: 50 }]);
    const { rows: steps } = await db.pool.query<{ state: string; n: number }>(
      `SELECT state, count(*)::int AS n FROM cyclone.cyclone_steps WHERE run_id = ANY($1::uuid[]) GROUP BY state`,
      [runIds],
    );
    expect(steps).toEqual([{ state: 'completed', n: 150 }]);
    // Exactly one committed effect per step: no loss, no duplicate.
    const { rows: fx } = await db.pool.query<{ n: number; distinct_steps: number }>(
      `SELECT count(*)::int AS n, count(DISTINCT (run_id, node))::int AS distinct_steps
       FROM chain_effects WHERE run_id = ANY($1::uuid[])`,
      [runIds],
    );
    expect(fx[0]).toEqual({ n: 150, distinct_steps: 150 });

    // The holder lost its transaction with its connection: attempt 1's write is gone, the
    // step ran again and committed exactly once.
    const held = await client.waitForRun(holderRun, { timeoutMs: 20_000 });
    expect(held.state).toBe('completed');
    expect(held.steps[0]?.attempt).toBeGreaterThanOrEqual(2);
    const { rows: hx } = await db.pool.query('SELECT 1 FROM chain_effects WHERE run_id = $1', [
      holderRun,
    ]);
    expect(hx).toHaveLength(1);

    // And the worker still works afterwards.
    const { runId } = await client.submit(Chain, { after: true });
    expect((await client.waitForRun(runId, { timeoutMs: 20_000 })).state).toBe('completed');
    process.off('uncaughtException', onUncaught);
    expect(uncaught, 'uncaught exceptions while connections were killed').toEqual([]);
  });
});
