/**
 * What Cyclone stores as jsonb is stored as given, or refused up front with a typed error:
 * - lone UTF-16 surrogates (valid in a JS string, refused by PostgreSQL's jsonb) in a run input
 *   or a step output are refused with `InputValidationError` / an `output_invalid` failure, and
 *   an error message cut at its length limit inside a surrogate pair is still recorded;
 * - an own `__proto__` key (as `JSON.parse` makes for webhook bodies) is kept, in inputs,
 *   outputs and the input hash of `submitOnce`.
 */
import { waitFor } from '@cyclone/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  Client,
  InputValidationError,
  newAction,
  newWorkflow,
  type StepInfo,
  SubmitKeyConflictError,
  Worker,
} from '../src/index.js';
import { createTestDb, type TestDb } from './support/db.js';

/** Half of a UTF-16 surrogate pair, alone. */
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

const runs = new Map<string, number>();
const ran = (runId: string) => runs.set(runId, (runs.get(runId) ?? 0) + 1);

// An error message longer than the 2,000 characters kept: character 2,000 is the first half of
// an emoji (say, an HTTP error body quoted in the message).
const LONG_MESSAGE = `${'x'.repeat(1999)}😀 and more`;
const longError = newAction(
  'long_error',
  async (ctx) => {
    ran(ctx.runId);
    throw new Error(LONG_MESSAGE);
  },
  { maxAttempts: 3, backoff: () => 60_000 },
);
const LongError = newWorkflow('long_error', { nodes: { only: { action: longError } } });

const loneSurrogateOut = newAction(
  'lone_surrogate_out',
  async (ctx) => {
    ran(ctx.runId);
    return { name: 'caf\uD83D' };
  },
  { maxAttempts: 3, backoff: () => 0 },
);
const LoneSurrogateOut = newWorkflow('lone_surrogate_out', {
  nodes: { only: { action: loneSurrogateOut } },
});

/** No worker runs it: its runs stay as submitted. */
const Unclaimed = newWorkflow('unclaimed', {
  nodes: { only: { action: newAction('unclaimed', async () => null) } },
});

const echo = newAction('echo_proto', async () => JSON.parse('{"__proto__": {"echo": 1}, "k": 2}'));
const Echo = newWorkflow('echo_proto', { nodes: { only: { action: echo } } });

describe('payloads', () => {
  let db: TestDb;
  let client: Client;
  let worker: Worker;

  beforeAll(async () => {
    db = await createTestDb();
    client = new Client({ connectionString: db.url, poolSize: 4 });
    // A 30 s lease: a failure or completion that cannot be recorded would leave the step
    // `running` far longer than these tests wait.
    worker = new Worker({
      client,
      workflows: [LongError, LoneSurrogateOut, Echo],
      leaseMs: 30_000,
    });
    await worker.start();
  });

  afterAll(async () => {
    await worker?.stop({ graceMs: 1_000 });
    await client?.close();
    await db?.drop();
  });

  /** The run's step once it is in `state`. @throws naming the state it is in (waitFor's last). */
  async function stepIn(runId: string, state: string): Promise<StepInfo> {
    const s = (await client.getRun(runId)).steps[0] as StepInfo;
    if (s.state !== state) throw new Error(`the step is ${s.state} at attempt ${s.attempt}`);
    return s;
  }

  async function runCount(): Promise<number> {
    const { rows } = await db.pool.query<{ n: number }>(
      'SELECT count(*)::int AS n FROM cyclone.cyclone_runs',
    );
    return rows[0]?.n ?? -1;
  }

  describe('lone surrogates', () => {
    it('an error message cut inside a surrogate pair is recorded, without the lone half', async () => {
      const { runId } = await client.submit(LongError, {});
      const step = await waitFor(
        'the failed attempt to be recorded',
        () => stepIn(runId, 'retryable'),
        {
          timeoutMs: 5_000,
        },
      );
      expect(step.attempt).toBe(1);
      expect(step.errors).toHaveLength(1);
      const [entry] = step.errors;
      expect(entry).toMatchObject({ attempt: 1, kind: 'error' });
      // Cut at the limit, and no half of the emoji left (it would make the entry unstorable).
      const message = entry?.message ?? '';
      expect(message.startsWith('x'.repeat(1999))).toBe(true);
      expect(message.length).toBeLessThanOrEqual(2000);
      expect(message).not.toMatch(LONE_SURROGATE);
      expect(entry?.stack).toContain(LONG_MESSAGE);
      // The backoff (60 s) holds: the handler ran once, not again after a lease expiry.
      expect(runs.get(runId)).toBe(1);
    });

    it('an output with a lone surrogate fails the step as output_invalid, once', async () => {
      const { runId } = await client.submit(LoneSurrogateOut, {});
      const step = await waitFor('the step to be discarded', () => stepIn(runId, 'discarded'), {
        timeoutMs: 5_000,
      });
      expect(step.attempt).toBe(1);
      expect(step.errors.map((e) => [e.attempt, e.kind])).toEqual([[1, 'output_invalid']]);
      expect(step.errors[0]?.message).toMatch(/surrogate/);
      expect((await client.getRun(runId)).state).toBe('failed');
      expect(runs.get(runId)).toBe(1);
    });

    it.each([
      ['a string value (high half)', { s: 'caf\uD83D' }, ['s']],
      ['a string value (low half)', { s: 'a\uDC00b' }, ['s']],
      ['a nested value', { a: [{ b: '\uDE00' }] }, ['a[0]', 'b']],
      ['an object key', { 'k\uD800': 1 }, []],
    ])(
      'a run input with a lone surrogate in %s → InputValidationError, nothing written',
      async (_, input, path) => {
        const before = await runCount();
        const err = await Unclaimed.submit(client, input).catch((e: unknown) => e);
        expect(err).toBeInstanceOf(InputValidationError);
        expect((err as InputValidationError).issues[0]).toMatchObject({ code: 'payload', path });
        expect((err as Error).message).toMatch(/surrogate/);
        await expect(client.submitOnce(Unclaimed, 'k', input)).rejects.toBeInstanceOf(
          InputValidationError,
        );
        expect(await runCount()).toBe(before);
        // A well-formed pair is stored as is.
        const { runId } = await client.submit(Unclaimed, { s: 'caf😀' });
        expect((await client.getRun(runId)).input).toEqual({ s: 'caf😀' });
      },
    );
  });

  describe('__proto__ keys', () => {
    const in1 = JSON.parse('{"order": 1, "__proto__": {"role": "admin"}}');
    const in2 = JSON.parse('{"order": 1, "__proto__": {"role": "guest"}}');

    it('an own __proto__ key of a run input is stored, and tells two submitOnce inputs apart', async () => {
      const r1 = await client.submitOnce(Echo, 'proto-key', in1);
      expect(r1.created).toBe(true);
      const { rows } = await db.pool.query<{ proto: unknown; order: unknown }>(
        `SELECT input->'__proto__' AS proto, input->'order' AS order
         FROM cyclone.cyclone_runs WHERE id = $1`,
        [r1.runId],
      );
      expect(rows[0]).toEqual({ proto: { role: 'admin' }, order: 1 });

      // The same input again: the same run. A different __proto__: a different submission.
      expect(await client.submitOnce(Echo, 'proto-key', JSON.parse(JSON.stringify(in1)))).toEqual({
        runId: r1.runId,
        created: false,
      });
      const conflict = await client.submitOnce(Echo, 'proto-key', in2).catch((e: unknown) => e);
      expect(conflict).toBeInstanceOf(SubmitKeyConflictError);
      expect((conflict as SubmitKeyConflictError).runId).toBe(r1.runId);
    });

    it('an own __proto__ key of a step output is stored', async () => {
      const { runId } = await client.submit(Echo, {});
      const run = await client.waitForRun(runId, { timeoutMs: 10_000 });
      expect(run.state).toBe('completed');
      const { rows } = await db.pool.query<{ proto: unknown; k: unknown }>(
        `SELECT output->'__proto__' AS proto, output->'k' AS k
         FROM cyclone.cyclone_steps WHERE run_id = $1`,
        [runId],
      );
      expect(rows[0]).toEqual({ proto: { echo: 1 }, k: 2 });
    });
  });
});
