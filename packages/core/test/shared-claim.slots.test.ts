/**
 * The claim shared by the workers on a caller-given pool reads each worker's free slots when its
 * statement goes out, not when the worker asked: slots freed while a request waits go in the same
 * statement. And requests made in one turn of the event loop go out in one statement.
 */
import pg from 'pg';
import { afterAll, beforeAll, beforeEach, expect, it } from 'vitest';
import { Client, newAction, newWorkflow } from '../src/index.js';
import { sharedClaim } from '../src/shared-claim.js';
import { createTestDb, type TestDb } from './support/db.js';

const noop = newAction('slots_noop', async () => null);
const Flow = newWorkflow('slots_flow', { nodes: { a: { action: noop } } });

let db: TestDb;
let pool: pg.Pool;
let client: Client;
/** Rows of each claim statement sent through `pool`, in order. */
let claims: number[] = [];

beforeAll(async () => {
  db = await createTestDb();
  pool = new pg.Pool({ connectionString: db.url, max: 4 });
  pool.on('connect', (conn) => {
    const query = conn.query.bind(conn) as (...a: unknown[]) => Promise<unknown>;
    (conn as unknown as { query: unknown }).query = async (...args: unknown[]) => {
      const c = args[0];
      const name = typeof c === 'object' && c !== null ? ((c as { name?: string }).name ?? '') : '';
      const res = (await query(...args)) as { rowCount: number | null };
      if (name.startsWith('cyclone_claim_steps_shared_')) claims.push(res.rowCount ?? 0);
      return res;
    };
  });
  client = new Client({ pool });
  await client.submitMany(
    Flow,
    Array.from({ length: 40 }, () => ({})),
  );
});
afterAll(async () => {
  await client?.close();
  await pool?.end();
  await db?.drop();
});
beforeEach(() => {
  claims = [];
});

/** A fresh shared claim of the test's workflow (a new key per test: its own lease). */
const claimer = (leaseMs: number) =>
  sharedClaim({
    pool,
    db: client.db,
    leaseMs,
    workflows: [Flow.name],
    nodeKeys: [`${Flow.name}/a`],
  });
const running = () => true;
const noLimit = () => {};

it('asks for the slots free when the statement goes out, not when the worker asked', async () => {
  const shared = claimer(60_000);
  let free = 1;
  const p = shared.claim('w-late', () => free, running, noLimit);
  // Freed after the request, before its statement: they count.
  free = 6;
  const got = await p;
  expect(got.asked).toBe(6);
  expect(got.rows).toHaveLength(6);
  expect(got.rows.every((r) => r.lease_owner === 'w-late')).toBe(true);
  expect(claims).toEqual([6]);
});

it('sends the requests made in one turn in one statement, each worker its own slots', async () => {
  const shared = claimer(60_001);
  const [a, b, c] = await Promise.all([
    shared.claim('w-a', () => 2, running, noLimit),
    shared.claim('w-b', () => 3, running, noLimit),
    // No free slot (or a stopping worker): nothing asked, nothing handed.
    shared.claim('w-c', () => 0, running, noLimit),
  ]);
  expect(claims).toEqual([5]);
  expect(a?.rows.map((r) => r.lease_owner)).toEqual(['w-a', 'w-a']);
  expect(b?.rows.map((r) => r.lease_owner)).toEqual(['w-b', 'w-b', 'w-b']);
  expect(c).toEqual({ rows: [], asked: 0 });
});

it('reads the slots of a request queued behind a statement in flight when its own goes out', async () => {
  const shared = claimer(60_002);
  let free = 1;
  const first = shared.claim('w-first', () => 1, running, noLimit);
  // Queued once the first statement is out: by then this worker has more slots free.
  await new Promise((r) => setImmediate(r));
  const second = shared.claim('w-second', () => free, running, noLimit);
  free = 4;
  expect((await first).rows).toHaveLength(1);
  const got = await second;
  expect(got.asked).toBe(4);
  expect(got.rows).toHaveLength(4);
  expect(claims).toEqual([1, 4]);
});

it('hands a worker that stopped while it waited nothing, and claims nothing for it', async () => {
  const shared = claimer(60_003);
  let up = true;
  const p = shared.claim(
    'w-stopped',
    () => 3,
    () => up,
    noLimit,
  );
  up = false;
  expect(await p).toEqual({ rows: [], asked: 0 });
  expect(claims).toEqual([]);
});
