/**
 * Every hot statement of the engine, in one place (CONVENTIONS.md § Layout). Each function takes
 * the quoted schema (schema.ts) and returns SQL text; values always travel as parameters.
 *
 * Counters on the run row (`steps_remaining`, `steps_active`) are changed in the same statement
 * as the step transition that moves them, under the run row's lock, so two upstream nodes
 * finishing at once never both miss a join and a run is completed (or failed) exactly once
 * (ARCHITECTURE.md § The crash matrix, counters).
 */

import { createHash } from 'node:crypto';

const names = new Map<string, string>();

/**
 * A query config for `text` as a named (prepared) statement: PostgreSQL parses it once per
 * connection instead of on every call (issue 8: the engine's CTE statements cost more to parse
 * and plan than to run at small batch sizes). The name is derived from the text, so one schema's
 * statements never collide with another's on a shared connection. With `prepare` false (a
 * transaction-pooling proxy that cannot keep prepared statements), an unnamed one.
 * @returns `{ name, text }` for pg's `query(config, values)`.
 */
export function prepared(text: string, prepare = true): { name?: string; text: string } {
  if (!prepare) return { text };
  let name = names.get(text);
  if (name === undefined) {
    name = `cyclone_${createHash('sha256').update(text).digest('hex').slice(0, 24)}`;
    names.set(text, name);
  }
  return { name, text };
}

/** The NOTIFY channel of a schema: workers LISTEN on it; the payload is the workflow name. */
export const channel = (schema: string) => `cyclone_${schema}`;

/**
 * Inserts a run and all its steps in one statement. With a submit key, `ON CONFLICT (workflow,
 * submit_key) DO NOTHING`: no row comes back when the key exists (ARCHITECTURE.md § Submission).
 * $1 id, $2 workflow, $3 input jsonb, $4 submit_key, $5 input_hash, $6 step count, $7 root
 * count, $8 nodes[], $9 actions[], $10 max_attempts[], $11 deps[], $12 downstream jsonb[],
 * $13 ancestors jsonb[], $14 channel.
 */
export const insertRun = (s: string) => `
WITH run AS (
  INSERT INTO ${s}.cyclone_runs
    (id, workflow, state, input, submit_key, input_hash, steps_remaining, steps_active)
  VALUES ($1, $2, 'running', $3::jsonb, $4, $5, $6, $7)
  ON CONFLICT (workflow, submit_key) DO NOTHING
  RETURNING id
), steps AS (
  INSERT INTO ${s}.cyclone_steps
    (run_id, node, workflow, action, state, max_attempts, deps_remaining, downstream, ancestors)
  SELECT run.id, n.node, $2, n.action,
         CASE WHEN n.deps = 0 THEN 'available' ELSE 'pending' END,
         n.max_attempts, n.deps,
         ARRAY(SELECT jsonb_array_elements_text(n.downstream)),
         ARRAY(SELECT jsonb_array_elements_text(n.ancestors))
  FROM run, unnest($8::text[], $9::text[], $10::int[], $11::int[], $12::jsonb[], $13::jsonb[])
       AS n(node, action, max_attempts, deps, downstream, ancestors)
  RETURNING 1
)
SELECT (SELECT id FROM run) AS id, (SELECT count(*) FROM steps)::int AS steps, pg_notify($14, $2)
WHERE EXISTS (SELECT 1 FROM run)`;

/**
 * Inserts many runs of one workflow and all their steps in one statement (`submitMany`, issue 8:
 * one round trip and one parse for up to a chunk of runs instead of one per run). The runs come
 * in as arrays (unnest); their steps are the cross product of the inserted runs and the
 * workflow's nodes, which are the same for every run of a workflow (as in `insertRun`: roots
 * `available`, the rest `pending`). No submit key, so no conflict: the statement inserts every
 * row or fails whole. One NOTIFY per statement.
 * $1 ids uuid[], $2 inputs jsonb[], $3 input_hashes text[], $4 workflow, $5 step count per run,
 * $6 root count, $7 nodes[], $8 actions[], $9 max_attempts[], $10 deps[], $11 downstream
 * jsonb[], $12 ancestors jsonb[], $13 channel. Returns one row: `runs`, `steps` inserted.
 */
export const insertRuns = (s: string) => `
WITH n AS MATERIALIZED (
  SELECT n.node, n.action, n.max_attempts, n.deps,
         ARRAY(SELECT jsonb_array_elements_text(n.downstream)) AS downstream,
         ARRAY(SELECT jsonb_array_elements_text(n.ancestors)) AS ancestors
  FROM unnest($7::text[], $8::text[], $9::int[], $10::int[], $11::jsonb[], $12::jsonb[])
       AS n(node, action, max_attempts, deps, downstream, ancestors)
), run AS (
  INSERT INTO ${s}.cyclone_runs
    (id, workflow, state, input, input_hash, steps_remaining, steps_active)
  SELECT r.id, $4::text, 'running', r.input, r.input_hash, $5::int, $6::int
  FROM unnest($1::uuid[], $2::jsonb[], $3::text[]) AS r(id, input, input_hash)
  RETURNING id
), steps AS (
  INSERT INTO ${s}.cyclone_steps
    (run_id, node, workflow, action, state, max_attempts, deps_remaining, downstream, ancestors)
  SELECT run.id, n.node, $4::text, n.action,
         CASE WHEN n.deps = 0 THEN 'available' ELSE 'pending' END,
         n.max_attempts, n.deps, n.downstream, n.ancestors
  FROM run CROSS JOIN n
  RETURNING 1
)
SELECT (SELECT count(*) FROM run)::int AS runs, (SELECT count(*) FROM steps)::int AS steps,
       pg_notify($13, $4::text)`;

/** The run holding a submit key. $1 workflow, $2 key. */
export const findByKey = (s: string) =>
  `SELECT id, input_hash FROM ${s}.cyclone_runs WHERE workflow = $1 AND submit_key = $2`;

/**
 * Claims up to $2 claimable steps of the workflows $1 for worker $3 with a lease of $4 ms, only
 * of the nodes $5 (`workflow/node`) the worker knows: during a rolling deploy an older worker
 * leaves a node that only the new version has to the new workers.
 * The candidates are locked in a MATERIALIZED CTE first (`FOR UPDATE SKIP LOCKED`), then the
 * UPDATE joins to them, so LIMIT really limits (ARCHITECTURE.md § Pitfalls). The attempt it sets
 * is the claim's fencing token. Returns the run input and the outputs of completed ancestors.
 */
export const claim = (s: string) => `
WITH c AS MATERIALIZED (
  SELECT run_id, node FROM ${s}.cyclone_steps
  WHERE state IN ('available', 'retryable') AND workflow = ANY($1::text[]) AND scheduled_at <= now()
    AND workflow || '/' || node = ANY($5::text[])
  ORDER BY scheduled_at
  LIMIT $2
  FOR UPDATE SKIP LOCKED
), u AS (
  UPDATE ${s}.cyclone_steps t
  SET state = 'running', attempt = t.attempt + 1, lease_owner = $3,
      lease_expires_at = now() + make_interval(secs => $4::double precision / 1000),
      started_at = now(), updated_at = now()
  FROM c WHERE t.run_id = c.run_id AND t.node = c.node
  RETURNING t.run_id, t.node, t.workflow, t.action, t.attempt, t.max_attempts, t.ancestors
)
SELECT u.run_id, u.node, u.workflow, u.action, u.attempt, u.max_attempts, r.input AS run_input,
  CASE WHEN cardinality(u.ancestors) = 0 THEN '{}'::jsonb ELSE
  (SELECT coalesce(jsonb_object_agg(a.node, a.output), '{}'::jsonb) FROM ${s}.cyclone_steps a
   WHERE a.run_id = u.run_id AND a.node = ANY(u.ancestors) AND a.state = 'completed') END AS upstream
FROM u JOIN ${s}.cyclone_runs r ON r.id = u.run_id`;

/**
 * Records a failed attempt, fenced like `complete`: `retryable` at now() + $5 ms, or `discarded`
 * when $6 (non-retryable) or `attempt >= max_attempts`. A discard moves the run's counters and
 * fails the run when nothing is left that can progress.
 * $1 run_id, $2 node, $3 attempt, $4 error entry jsonb, $5 delay ms, $6 non-retryable,
 * $7 channel, $8 workflow, $9 attempts given back (1 when the attempt was cut short by a
 * worker's stop, so a routine deploy never uses up a step's budget; else 0). Returns no row
 * when the fence did not match.
 */
export const fail = (s: string) => `
WITH f AS (
  UPDATE ${s}.cyclone_steps
  SET state = CASE WHEN $6::boolean OR attempt >= max_attempts + $9::int THEN 'discarded'
                   ELSE 'retryable' END,
      max_attempts = max_attempts + $9::int,
      scheduled_at = now() + make_interval(secs => $5::double precision / 1000),
      errors = errors || jsonb_build_array($4::jsonb),
      lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
  WHERE run_id = $1 AND node = $2 AND attempt = $3 AND state = 'running'
  RETURNING state
), run AS (
  UPDATE ${s}.cyclone_runs r
  SET steps_active = r.steps_active - 1,
      state = CASE WHEN r.state = 'running' AND r.steps_active = 1 THEN 'failed' ELSE r.state END,
      completed_at = CASE WHEN r.state = 'running' AND r.steps_active = 1 THEN now() ELSE r.completed_at END,
      updated_at = now()
  FROM f WHERE r.id = $1 AND f.state = 'discarded'
  RETURNING r.state
)
SELECT f.state AS step_state, (SELECT state FROM run) AS run_state,
       CASE WHEN f.state = 'retryable' AND $5::double precision <= 0 THEN pg_notify($7, $8) END AS notified
FROM f`;

/**
 * Extends the leases of a worker's in-flight steps in one statement (every lease/3), including
 * steps whose handler returned and whose outcome waits to be recorded. Only rows still `running`
 * at the same attempt and owned by $4 are extended. Rows locked right now are skipped, not
 * waited for (`SKIP LOCKED`): a completion batch blocked on one run's row lock must not hold up
 * the heartbeat of every other step. A skipped row still `running` under our attempt (as of this
 * statement) counts as held: whoever holds its lock (our own completion, or a sweep that
 * will tell the next heartbeat) decides it. The rows returned are the leases still held; the
 * others were lost. $1 run_ids, $2 nodes, $3 attempts, $4 owner, $5 lease ms.
 */
export const heartbeat = (s: string) => `
WITH mine AS MATERIALIZED (
  SELECT t.run_id, t.node, t.attempt
  FROM unnest($1::uuid[], $2::text[], $3::int[]) AS h(run_id, node, attempt)
  CROSS JOIN LATERAL (
    -- One primary-key lookup per step, whatever the statistics say (LIMIT 1 keeps the planner
    -- from flattening this into a join it might run as a scan of the table).
    SELECT t.run_id, t.node, t.attempt FROM ${s}.cyclone_steps t
    WHERE t.run_id = h.run_id AND t.node = h.node AND t.attempt = h.attempt
      AND t.state = 'running' AND t.lease_owner = $4
    LIMIT 1
  ) t
), locked AS MATERIALIZED (
  SELECT l.run_id, l.node, l.attempt FROM mine m
  CROSS JOIN LATERAL (
    SELECT t.run_id, t.node, t.attempt FROM ${s}.cyclone_steps t
    WHERE t.run_id = m.run_id AND t.node = m.node AND t.attempt = m.attempt
      AND t.state = 'running' AND t.lease_owner = $4
    LIMIT 1
    FOR UPDATE SKIP LOCKED
  ) l
), extended AS (
  UPDATE ${s}.cyclone_steps t
  SET lease_expires_at = now() + make_interval(secs => $5::double precision / 1000)
  FROM locked l WHERE t.run_id = l.run_id AND t.node = l.node
  RETURNING t.run_id, t.node, t.attempt
)
SELECT run_id, node, attempt FROM extended
UNION ALL
-- Held but locked right now; EXCEPT hashes, so this stays linear in the number of steps.
(SELECT run_id, node, attempt FROM mine EXCEPT SELECT run_id, node, attempt FROM locked)`;

/**
 * The recovery sweep: one statement that locks up to $1 `running` steps whose lease expired
 * (`FOR UPDATE SKIP LOCKED`, so a step being completed, failed or re-claimed right now is
 * skipped) and re-checks `state = 'running' AND lease_expires_at < now()` on the rows it
 * locked (ARCHITECTURE.md § Pitfalls: a sweep that overwrites). Each becomes `retryable` (now)
 * or `discarded` when its attempts are exhausted, with a `lease_expired` error entry.
 * Returns the swept steps; $2 channel.
 */
export const sweep = (s: string) => `
WITH x AS MATERIALIZED (
  SELECT run_id, node FROM ${s}.cyclone_steps
  WHERE state = 'running' AND lease_expires_at < now()
  ORDER BY lease_expires_at
  LIMIT $1
  FOR UPDATE SKIP LOCKED
), swept AS (
  UPDATE ${s}.cyclone_steps t
  SET state = CASE WHEN t.attempt >= t.max_attempts THEN 'discarded' ELSE 'retryable' END,
      scheduled_at = now(), lease_owner = NULL, lease_expires_at = NULL, updated_at = now(),
      errors = t.errors || jsonb_build_array(jsonb_build_object(
        'attempt', t.attempt, 'at', now(), 'kind', 'lease_expired',
        'message', 'lease expired (held by worker ' || coalesce(t.lease_owner, '?')
          || '): the worker died, stalled past its lease or lost its database connection'))
  FROM x WHERE t.run_id = x.run_id AND t.node = x.node
    -- The re-check on the locked row. Written with coalesce so that it does not imply the lease
    -- index's predicate: the planner then joins x to the rows by the primary key instead of
    -- reading every expired lease for each row of x (quadratic with stale statistics).
    AND t.state = 'running' AND coalesce(t.lease_expires_at, 'infinity') < now()
  RETURNING t.run_id, t.node, t.workflow, t.state, t.attempt
), d AS (
  SELECT run_id, count(*)::int AS n FROM swept WHERE state = 'discarded' GROUP BY run_id
), runs AS (
  UPDATE ${s}.cyclone_runs r
  SET steps_active = r.steps_active - d.n,
      state = CASE WHEN r.state = 'running' AND r.steps_active = d.n THEN 'failed' ELSE r.state END,
      completed_at = CASE WHEN r.state = 'running' AND r.steps_active = d.n THEN now() ELSE r.completed_at END,
      updated_at = now()
  FROM d WHERE r.id = d.run_id
  RETURNING r.id
)
SELECT swept.run_id, swept.node, swept.workflow, swept.state, swept.attempt,
       CASE WHEN swept.state = 'retryable' THEN pg_notify($2, swept.workflow) END AS notified
FROM swept`;

/**
 * Completes steps in one statement: a batch of steps that opened no `completionTx` (issue 8:
 * batched completion), or one step on its handler's `completionTx`. Each step is fenced on its own (`state = 'running' AND attempt = <its attempt>`);
 * downstream counters and run counters are moved by the sum over the batch, so two upstream
 * nodes of one join completing in the same batch release it once. The batch may touch several
 * runs: a deliberate exception to the one-run rule for throughput; it is one atomic statement,
 * and a deadlock with another batch rolls it back whole, to be retried.
 * $1 run_ids, $2 nodes, $3 attempts, $4 outputs (jsonb[]), $5 channel.
 * Returns one row per step completed (run_id, node, attempt); a step missing from the result was
 * fenced out (the same node may be in a batch twice, at an old and a new attempt).
 */
export const completeBatch = (s: string) => completeFrom(s, BATCH_INPUT);

/**
 * `completeBatch` for exactly one step, with scalar parameters: $1 run_id, $2 node, $3 attempt,
 * $4 output jsonb, $5 channel. The same transition; used on a handler's `completionTx` and for a
 * batch of one. With array parameters PostgreSQL plans every execution again (a generic plan of
 * `unnest($1)` is costed for 10 rows, so the per-call custom plan always looks cheaper): about
 * 370 µs of server CPU per single-step completion, against 120 µs for this form, whose generic
 * plan PostgreSQL keeps after five executions (measured on the bench machine).
 */
export const completeOne = (s: string) => completeFrom(s, ONE_INPUT);

const BATCH_INPUT = `SELECT * FROM unnest($1::uuid[], $2::text[], $3::int[], $4::jsonb[])
    AS i(run_id, node, attempt, output)`;
const ONE_INPUT = `SELECT $1::uuid AS run_id, $2::text AS node, $3::int AS attempt,
    $4::jsonb AS output`;

/** The completion statement over the steps `input` selects (BATCH_INPUT or ONE_INPUT). */
const completeFrom = (s: string, input: typeof BATCH_INPUT | typeof ONE_INPUT) => `
WITH input AS (
  ${input}
), done AS (
  UPDATE ${s}.cyclone_steps t
  SET state = 'completed', output = i.output, completed_at = now(), updated_at = now(),
      lease_owner = NULL, lease_expires_at = NULL
  FROM input i
  WHERE t.run_id = i.run_id AND t.node = i.node AND t.attempt = i.attempt AND t.state = 'running'
  RETURNING t.run_id, t.node, t.attempt, t.downstream
), edges AS (
  SELECT d.run_id, x.node, count(*)::int AS n
  FROM done d, unnest(d.downstream) AS x(node)
  GROUP BY d.run_id, x.node
  -- Lock order (no deadlock between two completions of one join): the downstream rows are
  -- updated, so locked, in (run_id, node) order (a nested loop over this ordered CTE, checked
  -- by test/prepared.test.ts), all of them before any run row, and the run rows in id order.
  -- Explicit FOR UPDATE locks would do the same at the cost of a second write per row
  -- (measured by bench/: no-op throughput 32,000 → 14,000 runs/s).
  ORDER BY d.run_id, x.node
), released AS (
  UPDATE ${s}.cyclone_steps t
  SET deps_remaining = t.deps_remaining - e.n,
      state = CASE WHEN t.deps_remaining = e.n AND t.state = 'pending' THEN 'available' ELSE t.state END,
      scheduled_at = CASE WHEN t.deps_remaining = e.n THEN now() ELSE t.scheduled_at END,
      updated_at = now()
  FROM edges e WHERE t.run_id = e.run_id AND t.node = e.node
  RETURNING t.run_id, t.state, t.workflow
), per_run AS (
  SELECT d.run_id, count(*)::int AS completed,
         (SELECT count(*) FROM released r WHERE r.run_id = d.run_id AND r.state = 'available')::int
           AS released
  FROM done d GROUP BY d.run_id
  -- Run rows in id order; per_run counts the released rows, so they all come after those.
  ORDER BY d.run_id
), runs AS (
  UPDATE ${s}.cyclone_runs r
  SET steps_remaining = r.steps_remaining - p.completed,
      steps_active = r.steps_active - p.completed + p.released,
      state = CASE
        WHEN r.state <> 'running' THEN r.state
        WHEN r.steps_remaining = p.completed THEN 'completed'
        WHEN r.steps_active - p.completed + p.released = 0 THEN 'failed'
        ELSE r.state END,
      completed_at = CASE WHEN r.state = 'running' AND (r.steps_remaining = p.completed
        OR r.steps_active - p.completed + p.released = 0) THEN now() ELSE r.completed_at END,
      updated_at = now()
  FROM per_run p WHERE r.id = p.run_id
  RETURNING r.id
)
SELECT d.run_id, d.node, d.attempt,
  (SELECT count(pg_notify($5, w.workflow))
   FROM (SELECT DISTINCT workflow FROM released WHERE state = 'available') w)::int AS notified
FROM done d`;

/**
 * Retention (`Client.deleteFinishedRuns`): deletes one batch of at most $4 finished runs in the
 * states $1 that finished more than $2 ms ago, oldest first, only of workflow $3 when it is not
 * NULL. The victims are locked in a MATERIALIZED CTE first (`FOR UPDATE SKIP LOCKED`: a run an
 * operator is retrying right now is skipped), then the DELETE joins to them, so LIMIT really
 * limits (ARCHITECTURE.md § Pitfalls), and re-checks the state on the rows it locked, so a run
 * that went back to `running` is never deleted. The literal state list matches the partial index
 * `cyclone_runs_finished` (migration 000004), which a generic plan of `state = ANY($1)` alone
 * could not use. Steps and @cyclone/idempotency's ledger rows go with their run (`ON DELETE
 * CASCADE`). Returns `deleted`, the number of runs deleted.
 */
export const deleteFinishedRuns = (s: string) => `
WITH victims AS MATERIALIZED (
  SELECT id FROM ${s}.cyclone_runs
  WHERE state IN ('completed', 'failed', 'cancelled') AND state = ANY($1::text[])
    AND completed_at < now() - make_interval(secs => $2::double precision / 1000)
    AND ($3::text IS NULL OR workflow = $3::text)
  ORDER BY completed_at
  LIMIT $4
  FOR UPDATE SKIP LOCKED
), gone AS (
  DELETE FROM ${s}.cyclone_runs r USING victims v
  WHERE r.id = v.id AND r.state IN ('completed', 'failed', 'cancelled') AND r.state = ANY($1::text[])
  RETURNING 1
)
SELECT count(*)::int AS deleted FROM gone`;
