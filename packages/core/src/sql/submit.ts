/**
 * Submission: a run and all its steps in one statement (`submit`, `submitOnce`), many runs of one
 * workflow per statement (`submitMany`), and the run holding a submit key.
 */
import { defineStatement, type Queryable, type SqlScope, send } from './statement.js';

/**
 * Inserts a run and all its steps in one statement. With a submit key, `ON CONFLICT (workflow,
 * submit_key) WHERE submit_key IS NOT NULL DO NOTHING`: no row comes back when the key exists
 * (the predicate lets the conflict be inferred from the unique constraint of today or from a
 * partial unique index a later migration may make of it).
 * $1 id, $2 workflow, $3 input jsonb, $4 submit_key, $5 input_hash, $6 step count, $7 root
 * count, $8 nodes[], $9 actions[], $10 max_attempts[], $11 deps[], $12 downstream jsonb[],
 * $13 ancestors jsonb[], $14 channel, $15 run_at timestamptz or NULL, $16 delay ms (from now()
 * when $15 is NULL), $17 node delays ms bigint[]. A root node waits `scheduled` until the run's
 * start plus its own delay when that is in the future, by the database's clock (a root wait
 * node too: reached then, its deadline counts from then; $18 signal names text[], $19 timeouts
 * ms bigint[], NULL for action nodes and no timeout); the other nodes
 * keep their delay for the moment they are released. $20 the submit's traceparent or NULL. $21
 * the run's priority, given to every step; $22 each node's flow smallint[] (`flowOf`).
 */
export const insertRunSql = (s: string) => `
WITH run AS (
  INSERT INTO ${s}.cyclone_runs
    (id, workflow, state, input, submit_key, input_hash, steps_remaining, steps_active,
     traceparent)
  VALUES ($1, $2, 'running', $3::jsonb, $4, $5, $6, $7, $20)
  ON CONFLICT (workflow, submit_key) WHERE submit_key IS NOT NULL DO NOTHING
  RETURNING id
), steps AS (
  INSERT INTO ${s}.cyclone_steps
    (run_id, node, workflow, action, state, max_attempts, deps_remaining, downstream, ancestors,
     delay_ms, scheduled_at, wait_for, wait_timeout_ms, wait_deadline, priority, flow)
  SELECT run.id, n.node, $2, n.action,
         CASE WHEN n.deps > 0 THEN 'pending' WHEN t.at > now() THEN 'scheduled'
              ELSE 'available' END,
         n.max_attempts, n.deps,
         ARRAY(SELECT jsonb_array_elements_text(n.downstream)),
         ARRAY(SELECT jsonb_array_elements_text(n.ancestors)),
         n.delay_ms,
         CASE WHEN n.deps = 0 THEN greatest(t.at, now()) ELSE now() END,
         n.wait_for, n.wait_timeout_ms,
         CASE WHEN n.deps = 0 AND n.wait_for IS NOT NULL THEN greatest(t.at, now())
                + make_interval(secs => n.wait_timeout_ms::double precision / 1000) END,
         $21::int, n.flow
  FROM run,
       unnest($8::text[], $9::text[], $10::int[], $11::int[], $12::jsonb[], $13::jsonb[],
              $17::bigint[], $18::text[], $19::bigint[], $22::smallint[])
         AS n(node, action, max_attempts, deps, downstream, ancestors, delay_ms, wait_for,
              wait_timeout_ms, flow),
       LATERAL (SELECT coalesce($15::timestamptz,
                                now() + make_interval(secs => $16::double precision / 1000))
                       + make_interval(secs => n.delay_ms::double precision / 1000) AS at) t
  RETURNING 1
)
SELECT (SELECT id FROM run) AS id, (SELECT count(*) FROM steps)::int AS steps, pg_notify($14, $2)
WHERE EXISTS (SELECT 1 FROM run)`;

/**
 * Inserts many runs of one workflow and all their steps in one statement (`submitMany`:
 * one round trip and one parse for up to a chunk of runs instead of one per run). The runs come
 * in as arrays (unnest); their steps are the cross product of the inserted runs and the
 * workflow's nodes, which are the same for every run of a workflow (as in `insertRun`: roots
 * `available` or `scheduled`, the rest `pending`). No submit key, so no conflict: the statement
 * inserts every row or fails whole. One NOTIFY per statement.
 * $1 ids uuid[], $2 inputs jsonb[], $3 input_hashes text[], $4 workflow, $5 step count per run,
 * $6 root count, $7 nodes[], $8 actions[], $9 max_attempts[], $10 deps[], $11 downstream
 * jsonb[], $12 ancestors jsonb[], $13 channel, $14 run_at or NULL, $15 delay ms, $17 signal
 * names text[], $18 wait timeouts bigint[], $16 node delays
 * ms bigint[] (as in `insertRun`), $19 the submit's traceparent or NULL (every run of the
 * statement gets it), $20 the runs' priority, $21 each node's flow smallint[] (as in `insertRun`).
 * Returns one row: `runs`, `steps` inserted.
 */
export const insertRunsSql = (s: string) => `
WITH n AS MATERIALIZED (
  SELECT n.node, n.action, n.max_attempts, n.deps,
         ARRAY(SELECT jsonb_array_elements_text(n.downstream)) AS downstream,
         ARRAY(SELECT jsonb_array_elements_text(n.ancestors)) AS ancestors,
         n.delay_ms, n.wait_for, n.wait_timeout_ms, n.flow,
         coalesce($14::timestamptz, now() + make_interval(secs => $15::double precision / 1000))
           + make_interval(secs => n.delay_ms::double precision / 1000) AS at
  FROM unnest($7::text[], $8::text[], $9::int[], $10::int[], $11::jsonb[], $12::jsonb[],
              $16::bigint[], $17::text[], $18::bigint[], $21::smallint[])
       AS n(node, action, max_attempts, deps, downstream, ancestors, delay_ms, wait_for,
            wait_timeout_ms, flow)
), run AS (
  INSERT INTO ${s}.cyclone_runs
    (id, workflow, state, input, input_hash, steps_remaining, steps_active, traceparent)
  SELECT r.id, $4::text, 'running', r.input, r.input_hash, $5::int, $6::int, $19::text
  FROM unnest($1::uuid[], $2::jsonb[], $3::text[]) AS r(id, input, input_hash)
  RETURNING id
), steps AS (
  INSERT INTO ${s}.cyclone_steps
    (run_id, node, workflow, action, state, max_attempts, deps_remaining, downstream, ancestors,
     delay_ms, scheduled_at, wait_for, wait_timeout_ms, wait_deadline, priority, flow)
  SELECT run.id, n.node, $4::text, n.action,
         CASE WHEN n.deps > 0 THEN 'pending' WHEN n.at > now() THEN 'scheduled'
              ELSE 'available' END,
         n.max_attempts, n.deps, n.downstream, n.ancestors,
         n.delay_ms,
         CASE WHEN n.deps = 0 THEN greatest(n.at, now()) ELSE now() END,
         n.wait_for, n.wait_timeout_ms,
         CASE WHEN n.deps = 0 AND n.wait_for IS NOT NULL THEN greatest(n.at, now())
                + make_interval(secs => n.wait_timeout_ms::double precision / 1000) END,
         $20::int, n.flow
  FROM run CROSS JOIN n
  RETURNING 1
)
SELECT (SELECT count(*) FROM run)::int AS runs, (SELECT count(*) FROM steps)::int AS steps,
       pg_notify($13, $4::text)`;

/** The run holding a submit key. $1 workflow, $2 key. */
export const findRunByKeySql = (s: string) =>
  `SELECT id, input_hash FROM ${s}.cyclone_runs WHERE workflow = $1 AND submit_key = $2`;

/**
 * The per-node columns of a workflow's steps, the same for every run of it: node count, root
 * count, then one array per column in the workflow's node order (`downstream` and `ancestors`
 * as JSON text).
 */
export interface StepColumns {
  stepCount: number;
  rootCount: number;
  nodes: string[];
  actions: string[];
  maxAttempts: number[];
  deps: number[];
  downstream: string[];
  ancestors: string[];
  /** Each node's timer, ms (0: none). */
  delays: number[];
  /** Each node's signal name (a wait node), or null. */
  waitFor: (string | null)[];
  /** Each wait node's timeout, ms, or null (none, or not a wait node). */
  waitTimeouts: (number | null)[];
  /** Each node's flow: which claim takes its steps (`flowOf`). */
  flows: number[];
}

/** When a run starts: at `runAt`, or `delayMs` after the insert (database clock); default now. */
export interface RunStart {
  runAt: Date | null;
  delayMs: number;
}

/** The step columns as statement values, in `insertRun`'s order ($6–$13 there). */
export const stepValues = (c: StepColumns) => [
  c.stepCount,
  c.rootCount,
  c.nodes,
  c.actions,
  c.maxAttempts,
  c.deps,
  c.downstream,
  c.ancestors,
];

const insertRunStatement = defineStatement('insert_run', insertRunSql);
const insertRunsStatement = defineStatement('insert_runs', insertRunsSql);
const findRunByKeyStatement = defineStatement('find_run_by_key', findRunByKeySql, false);

/**
 * Inserts one run and its steps. With `submitKey`, returns no row when the key already has a run.
 * @param plainText true on a caller's transaction (`Tx.query` takes text only).
 * @returns `[{ id }]` when inserted, `[]` on a key conflict.
 */
export async function insertRun(
  on: Queryable,
  db: SqlScope,
  p: {
    runId: string;
    workflow: string;
    /** The run input as JSON text. */
    input: string;
    submitKey: string | null;
    inputHash: string;
    steps: StepColumns;
    start: RunStart;
    /** The submit span's W3C traceparent, or null. */
    traceparent: string | null;
    /** The run's priority. */
    priority: number;
  },
  plainText = false,
): Promise<{ id: string }[]> {
  const values = [
    p.runId,
    p.workflow,
    p.input,
    p.submitKey,
    p.inputHash,
    ...stepValues(p.steps),
    db.channel,
    p.start.runAt,
    p.start.delayMs,
    p.steps.delays,
    p.steps.waitFor,
    p.steps.waitTimeouts,
    p.traceparent,
    p.priority,
    p.steps.flows,
  ];
  return (await send<{ id: string }>(on, insertRunStatement(db), values, plainText)).rows;
}

/**
 * Inserts many runs of one workflow and their steps; all or nothing.
 * @param plainText true on a caller's transaction (`Tx.query` takes text only).
 */
export async function insertRuns(
  on: Queryable,
  db: SqlScope,
  p: {
    runIds: string[];
    /** The runs' inputs as JSON text, in the order of `runIds`. */
    inputs: string[];
    inputHashes: string[];
    workflow: string;
    steps: StepColumns;
    start: RunStart;
    /** The submit span's W3C traceparent, or null. */
    traceparent: string | null;
    /** The runs' priority. */
    priority: number;
  },
  plainText = false,
): Promise<void> {
  await send(
    on,
    insertRunsStatement(db),
    [
      p.runIds,
      p.inputs,
      p.inputHashes,
      p.workflow,
      ...stepValues(p.steps),
      db.channel,
      p.start.runAt,
      p.start.delayMs,
      p.steps.delays,
      p.steps.waitFor,
      p.steps.waitTimeouts,
      p.traceparent,
      p.priority,
      p.steps.flows,
    ],
    plainText,
  );
}

/** The run of `workflow` holding `key`, if any, with its input's hash. */
export async function findRunByKey(
  on: Queryable,
  db: SqlScope,
  p: { workflow: string; key: string | null },
): Promise<{ id: string; input_hash: string } | undefined> {
  const { rows } = await send<{ id: string; input_hash: string }>(
    on,
    findRunByKeyStatement(db),
    [p.workflow, p.key],
    true,
  );
  return rows[0];
}
