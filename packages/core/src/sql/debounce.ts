/**
 * Debounce (`submit` with `{ debounce }`): the open run of a (workflow, debounce key), the
 * statement that absorbs a submit into it or takes the key off it once it started, and the insert
 * of a run holding a key. At most one run holds a key (the partial unique index
 * `cyclone_runs_debounce_key`); the transaction that runs them is in `debounce.ts`.
 */
import { defineStatement, type Queryable, type SqlScope, send } from './statement.js';
import { type StepColumns, stepValues } from './submit.js';

/**
 * Locks the run holding debounce key $2 of workflow $1, if any. `FOR NO KEY UPDATE` is enough to
 * serialize the submitters of one key (it conflicts with itself), and unlike `FOR UPDATE` it does
 * not hold back the run's own steps writing rows that reference it. Under READ COMMITTED a
 * submitter that waited here gets the row as the holder left it: no row when the holder took the
 * key off (its run had started).
 */
export const lockDebouncedRunSql = (s: string) =>
  `SELECT id FROM ${s}.cyclone_runs WHERE workflow = $1 AND debounce_key = $2 FOR NO KEY UPDATE`;

/**
 * Absorbs a submit into the locked run $1 while none of its root steps has started: the roots
 * still `scheduled` and never claimed (`started_at IS NULL`: a snoozed root is `scheduled` again
 * but started; a wait node's time is its signal's, never pushed, so it counts as started) are
 * locked, and when they are all of its roots, they move to
 * `least(clock_timestamp() + $4 ms, created_at + $5 ms)` plus their own node delay, and the run
 * takes input $2 (hash $3). Otherwise the key is taken off the run, for a follow-up run to take.
 * `SKIP LOCKED`: a root a claim holds right now is being started, so it counts as started; and
 * never waiting on a step here means no lock cycle with a completion, which locks steps before
 * the run row this transaction holds. The locked roots stay locked until commit, and a claim
 * skips locked rows, so none of them starts before this submit's new time is committed.
 * `clock_timestamp()`, not `now()`: the time this submit took the run's lock, which orders the
 * submitters of one key as their commits do (`now()` is when each transaction began).
 * $1 run id, $2 input jsonb, $3 input hash, $4 delay ms, $5 max delay ms or NULL (no cap),
 * $6 channel, $7 workflow. Returns `absorbed` and, when absorbed, `starts_at` (the roots' new
 * time before their node delays).
 */
export const absorbDebouncedSql = (s: string) => `
WITH waiting AS MATERIALIZED (
  SELECT node FROM ${s}.cyclone_steps
  WHERE run_id = $1 AND cardinality(ancestors) = 0 AND state = 'scheduled' AND started_at IS NULL
    AND wait_for IS NULL
  FOR UPDATE SKIP LOCKED
), decision AS (
  SELECT (SELECT count(*) FROM waiting) =
         (SELECT count(*) FROM ${s}.cyclone_steps WHERE run_id = $1 AND cardinality(ancestors) = 0)
           AS open
), run AS (
  UPDATE ${s}.cyclone_runs r
  SET input = CASE WHEN d.open THEN $2::jsonb ELSE r.input END,
      input_hash = CASE WHEN d.open THEN $3::text ELSE r.input_hash END,
      debounce_key = CASE WHEN d.open THEN r.debounce_key END,
      updated_at = now()
  FROM decision d WHERE r.id = $1
  RETURNING d.open,
    least(clock_timestamp() + make_interval(secs => $4::double precision / 1000),
          r.created_at + make_interval(secs => $5::double precision / 1000)) AS starts_at
), pushed AS (
  UPDATE ${s}.cyclone_steps t
  SET scheduled_at = run.starts_at + make_interval(secs => t.delay_ms::double precision / 1000),
      updated_at = now()
  FROM waiting w, run
  WHERE run.open AND t.run_id = $1 AND t.node = w.node
  RETURNING 1
)
SELECT run.open AS absorbed, CASE WHEN run.open THEN run.starts_at END AS starts_at,
  -- Workers re-read their next due time: this submit may have moved it earlier.
  (SELECT count(pg_notify($6, $7)) FROM run WHERE run.open)::int AS notified
FROM run`;

/**
 * Inserts a run holding debounce key $4 and all its steps in one statement, as `insertRun` but
 * with `ON CONFLICT (workflow, debounce_key) DO NOTHING` (no row when another run holds the key;
 * a conflicting insert in progress is waited for) and roots always `scheduled`, even when due at
 * once, since a debounced run stays open until a claim starts a root. The roots wait until
 * `least(clock_timestamp() + $15 ms, now() + $16 ms)` plus their own node delay (`now()` is the
 * run's `created_at`). A wait node keeps its signal name and timeout for when it is released (a
 * root wait node is refused at submit).
 * $1 id, $2 workflow, $3 input jsonb, $4 debounce key, $5 input hash, $6–$13 the step columns as
 * in `insertRun`, $14 channel, $15 delay ms, $16 max delay ms or NULL (no cap), $17 node delays
 * ms bigint[], $18 signal names text[], $19 wait timeouts ms bigint[] (as in `insertRun`), $20
 * the traceparent of the submit that creates the run, or NULL, $21 the run's priority, $22 each
 * node's flow smallint[] (as in `insertRun`).
 */
export const insertDebouncedRunSql = (s: string) => `
WITH t AS (
  SELECT least(clock_timestamp() + make_interval(secs => $15::double precision / 1000),
               now() + make_interval(secs => $16::double precision / 1000)) AS at
), run AS (
  INSERT INTO ${s}.cyclone_runs
    (id, workflow, state, input, debounce_key, input_hash, steps_remaining, steps_active,
     traceparent)
  VALUES ($1, $2, 'running', $3::jsonb, $4, $5, $6, $7, $20)
  ON CONFLICT (workflow, debounce_key) WHERE debounce_key IS NOT NULL DO NOTHING
  RETURNING id
), steps AS (
  INSERT INTO ${s}.cyclone_steps
    (run_id, node, workflow, action, state, max_attempts, deps_remaining, downstream, ancestors,
     delay_ms, scheduled_at, wait_for, wait_timeout_ms, priority, flow)
  SELECT run.id, n.node, $2, n.action,
         CASE WHEN n.deps > 0 THEN 'pending' ELSE 'scheduled' END,
         n.max_attempts, n.deps,
         ARRAY(SELECT jsonb_array_elements_text(n.downstream)),
         ARRAY(SELECT jsonb_array_elements_text(n.ancestors)),
         n.delay_ms,
         CASE WHEN n.deps = 0
              THEN t.at + make_interval(secs => n.delay_ms::double precision / 1000)
              ELSE now() END,
         n.wait_for, n.wait_timeout_ms, $21::int, n.flow
  FROM run, t,
       unnest($8::text[], $9::text[], $10::int[], $11::int[], $12::jsonb[], $13::jsonb[],
              $17::bigint[], $18::text[], $19::bigint[], $22::smallint[])
         AS n(node, action, max_attempts, deps, downstream, ancestors, delay_ms, wait_for,
              wait_timeout_ms, flow)
  RETURNING 1
)
SELECT (SELECT id FROM run) AS id, (SELECT count(*) FROM steps)::int AS steps, pg_notify($14, $2)
WHERE EXISTS (SELECT 1 FROM run)`;

const lockDebouncedRunStatement = defineStatement('lock_debounced_run', lockDebouncedRunSql);
const absorbDebouncedStatement = defineStatement('absorb_debounced', absorbDebouncedSql);
const insertDebouncedRunStatement = defineStatement('insert_debounced_run', insertDebouncedRunSql);

/**
 * A debounce window: the run starts `delayMs` after the last submit, at most `maxDelayMs` after
 * it was created.
 */
export interface DebounceWindow {
  delayMs: number;
  /** null: no cap. */
  maxDelayMs: number | null;
}

/**
 * Locks the run holding `key` of `workflow` (in the caller's transaction).
 * @param plainText true on a caller's transaction (`Tx.query` takes text only).
 * @returns its id, or undefined when no run holds the key.
 */
export async function lockDebouncedRun(
  on: Queryable,
  db: SqlScope,
  p: { workflow: string; key: string },
  plainText = false,
): Promise<string | undefined> {
  const { rows } = await send<{ id: string }>(
    on,
    lockDebouncedRunStatement(db),
    [p.workflow, p.key],
    plainText,
  );
  return rows[0]?.id;
}

/**
 * Absorbs a submit into the locked run `runId` when none of its roots has started, else takes
 * the key off it.
 * @param plainText true on a caller's transaction (`Tx.query` takes text only).
 * @returns true when absorbed; false when the run had started and no longer holds the key.
 */
export async function absorbDebounced(
  on: Queryable,
  db: SqlScope,
  p: {
    runId: string;
    workflow: string;
    /** The run input as JSON text. */
    input: string;
    inputHash: string;
    window: DebounceWindow;
  },
  plainText = false,
): Promise<boolean> {
  const { rows } = await send<{ absorbed: boolean }>(
    on,
    absorbDebouncedStatement(db),
    [p.runId, p.input, p.inputHash, p.window.delayMs, p.window.maxDelayMs, db.channel, p.workflow],
    plainText,
  );
  // No row only if the run vanished under the lock, which nothing does: treat it as closed.
  return rows[0]?.absorbed === true;
}

/**
 * Inserts a run holding debounce key `key`, and its steps.
 * @param plainText true on a caller's transaction (`Tx.query` takes text only).
 * @returns true when inserted, false when another run holds the key.
 */
export async function insertDebouncedRun(
  on: Queryable,
  db: SqlScope,
  p: {
    runId: string;
    workflow: string;
    /** The run input as JSON text. */
    input: string;
    key: string;
    inputHash: string;
    steps: StepColumns;
    window: DebounceWindow;
    /** The submit span's W3C traceparent, or null. */
    traceparent: string | null;
    /** The run's priority. */
    priority: number;
  },
  plainText = false,
): Promise<boolean> {
  const { rows } = await send<{ id: string }>(
    on,
    insertDebouncedRunStatement(db),
    [
      p.runId,
      p.workflow,
      p.input,
      p.key,
      p.inputHash,
      ...stepValues(p.steps),
      db.channel,
      p.window.delayMs,
      p.window.maxDelayMs,
      p.steps.delays,
      p.steps.waitFor,
      p.steps.waitTimeouts,
      p.traceparent,
      p.priority,
      p.steps.flows,
    ],
    plainText,
  );
  return rows.length > 0;
}
