/**
 * Flow control (docs/flow-control.md): the limited claim, the resolution of limit keys, the
 * discard of a step whose key cannot be computed, the usage that `listLimits` reports, and the
 * limits the workers record.
 *
 * Every limited claim of an action holds the action's advisory lock (`beginLockedSql`, its own
 * statement at the start of the claim's transaction), so that the claim's statement, whose
 * snapshot is taken after the lock was granted, sees every admission the previous holder
 * committed: two claims never count the same free slot or window twice.
 */
import { createHash } from 'node:crypto';
import type { ClaimedStep } from './claim.js';
import { runStepDiscardedSql } from './discard.js';
import { defineStatement, type Queryable, type SqlScope, send } from './statement.js';

const CLAIMABLE = `state IN ('available', 'retryable', 'scheduled')`;
/** The fairness key of a step: its concurrency key, else its rate-limit key, else ''. */
const FAIR_KEY = `coalesce(concurrency_key, rate_limit_key, '')`;

/** How long a limited claim waits for its action's lock before it skips the action, ms (the `lock_timeout` in `beginLockedSql`). */
export const ACTION_LOCK_WAIT_MS = 250;

/**
 * Opens the claim's transaction and takes the advisory lock `key` (a 64-bit integer, see
 * `actionLockKey`) in one round trip: a simple query of `BEGIN`, a `lock_timeout` of
 * `ACTION_LOCK_WAIT_MS` for the lock alone, and the lock, which holds until the transaction
 * ends. A holder that stalls (a frozen worker, a session left open) makes the wait fail with
 * SQLSTATE 55P03 instead of holding up the whole claim loop. The key is a number made here,
 * never data.
 */
export const beginLockedSql = (key: bigint) =>
  `BEGIN; SET LOCAL lock_timeout = 250; SELECT pg_advisory_xact_lock(${BigInt.asIntN(64, key).toString()}); SET LOCAL lock_timeout = 0`;

/** True for the error of a lock wait that ran out (`lock_timeout`, SQLSTATE 55P03). */
export function isLockWaitTimeout(err: unknown): boolean {
  return (err as { code?: unknown } | null)?.code === '55P03';
}

/**
 * The advisory lock key of `name` (schema and action): the first 8 bytes of its SHA-256 as a
 * signed 64-bit integer. Two names with one key only serialize their claims needlessly.
 */
export function actionLockKey(name: string): bigint {
  return createHash('sha256').update(name).digest().readBigInt64BE(0);
}

/**
 * The limited claim of one action, inside a transaction that holds the action's lock.
 * $1 action, $2 workflows, $3 node keys (`workflow/node`, as the plain claim), $4 steps wanted,
 * $5 worker id, $6 lease ms, $7 concurrency limit or NULL, $8 concurrency limit per key or NULL,
 * $9 rate limit or NULL, $10 its period ms, $11 rate limit per key or NULL, $12 its period ms,
 * $13 the fairness key this worker served last ('' to begin), $14 most keys visited, $15 most
 * candidates per key.
 *
 * 1. `ka`/`kb`: the keys with claimable steps of the action, by a loose index scan of
 *    `cyclone_steps_limited`: those after $13 first, then from the start (round-robin), at most
 *    $14; `pos` is each key's place in that order.
 * 2. `cand`: each key's best due steps (priority, then time), at most $15 ($4 for '' , the steps
 *    without a key).
 * 3. Admission, in the order priority, then key position, then time: per concurrency key
 *    (running steps of the key + rank ≤ limit per key), then per rate-limit key (admissions in
 *    the window (T − period, T] + rank ≤ limit per key), then over the action (running, window,
 *    and at most $4). A step without a key passes the limits per key. T is `clock_timestamp()`
 *    read once, after the lock: it is the admission instant, the lease's start and `started_at`.
 * 4. The admitted steps are locked (`SKIP LOCKED`: one an operator holds is left) and leased;
 *    each admission of a rate-limited action is logged at T; log rows older than the longest
 *    period are deleted.
 * Returns the leased steps as the plain claim does (`ClaimedStep`), then one row with `run_id`
 * NULL: `cursor` (the fairness key to start after next time) and `next_in_ms` (when a step held
 * back by a rate limit may start, ms from T; NULL when none was held back by one).
 */
export const claimLimitedSql = (s: string) => claimLimitedFrom(s, UPSTREAM);

/**
 * The limited claim without the upstream outputs (`upstream` NULL for a step with ancestors, to
 * be loaded step by step): the fallback when one step's outputs are over PostgreSQL's limit for
 * one value, as for the plain claim (`claimStepsWithoutUpstreamSql`).
 */
export const claimLimitedWithoutUpstreamSql = (s: string) => claimLimitedFrom(s, NO_UPSTREAM);

const claimLimitedFrom = (s: string, upstream: typeof UPSTREAM | typeof NO_UPSTREAM) => `
WITH RECURSIVE clock AS MATERIALIZED (SELECT clock_timestamp() AS t),
ka(k, i) AS (
  (SELECT ${FAIR_KEY}, 1 FROM ${s}.cyclone_steps
   WHERE action = $1 AND ${CLAIMABLE} AND flow = 2 AND ${FAIR_KEY} > $13::text
   ORDER BY ${FAIR_KEY} LIMIT 1)
  UNION ALL
  SELECT (SELECT ${FAIR_KEY} FROM ${s}.cyclone_steps
          WHERE action = $1 AND ${CLAIMABLE} AND flow = 2 AND ${FAIR_KEY} > ka.k
          ORDER BY ${FAIR_KEY} LIMIT 1), ka.i + 1
  FROM ka WHERE ka.k IS NOT NULL AND ka.i < $14
),
kb(k, i) AS (
  (SELECT ${FAIR_KEY}, 1 FROM ${s}.cyclone_steps
   WHERE action = $1 AND ${CLAIMABLE} AND flow = 2 AND ${FAIR_KEY} <= $13::text
   ORDER BY ${FAIR_KEY} LIMIT 1)
  UNION ALL
  SELECT (SELECT ${FAIR_KEY} FROM ${s}.cyclone_steps
          WHERE action = $1 AND ${CLAIMABLE} AND flow = 2 AND ${FAIR_KEY} > kb.k
            AND ${FAIR_KEY} <= $13::text
          ORDER BY ${FAIR_KEY} LIMIT 1), kb.i + 1
  FROM kb WHERE kb.k IS NOT NULL AND kb.i < $14
),
keys AS MATERIALIZED (
  SELECT k, pos FROM (
    SELECT k, i AS pos FROM ka WHERE k IS NOT NULL
    UNION ALL
    SELECT k, i + (SELECT count(*) FROM ka WHERE k IS NOT NULL) FROM kb WHERE k IS NOT NULL
  ) all_keys WHERE pos <= $14
),
cand AS MATERIALIZED (
  SELECT x.run_id, x.node, x.priority, x.scheduled_at, x.ck, x.rk, keys.k AS fk, keys.pos
  FROM keys CROSS JOIN LATERAL (
    SELECT run_id, node, priority, scheduled_at, concurrency_key AS ck, rate_limit_key AS rk
    FROM ${s}.cyclone_steps
    WHERE action = $1 AND ${CLAIMABLE} AND flow = 2 AND ${FAIR_KEY} = keys.k
      AND scheduled_at <= (SELECT t FROM clock)
      AND workflow = ANY($2::text[]) AND workflow || '/' || node = ANY($3::text[])
    ORDER BY priority DESC, scheduled_at
    LIMIT CASE WHEN keys.k = '' THEN $4::int ELSE $15::int END
  ) x
),
ck_held AS MATERIALIZED (
  SELECT c.ck, (SELECT count(*) FROM ${s}.cyclone_steps r
                WHERE r.action = $1 AND r.state = 'running' AND r.flow > 0
                  AND r.concurrency_key = c.ck)::int AS n
  FROM (SELECT DISTINCT ck FROM cand WHERE ck IS NOT NULL AND $8::int IS NOT NULL) c
),
rk_window AS MATERIALIZED (
  SELECT c.rk, w.n, w.oldest
  FROM (SELECT DISTINCT rk FROM cand WHERE rk IS NOT NULL AND $11::int IS NOT NULL) c
  CROSS JOIN LATERAL (
    SELECT count(*)::int AS n, min(a.at) AS oldest FROM ${s}.cyclone_rate_admissions a
    WHERE a.action = $1 AND a.key = c.rk
      AND a.at > (SELECT t FROM clock) - make_interval(secs => $12::double precision / 1000)
  ) w
),
totals AS MATERIALIZED (
  SELECT
    CASE WHEN $7::int IS NULL THEN NULL ELSE
      (SELECT count(*) FROM ${s}.cyclone_steps r
       WHERE r.action = $1 AND r.state = 'running' AND r.flow > 0)::int END AS held,
    w.n AS win, w.oldest
  FROM (SELECT CASE WHEN $9::int IS NULL THEN 0 ELSE count(*)::int END AS n, min(a.at) AS oldest
        FROM ${s}.cyclone_rate_admissions a
        WHERE $9::int IS NOT NULL AND a.action = $1
          AND a.at > (SELECT t FROM clock) - make_interval(secs => $10::double precision / 1000)) w
),
r1 AS (
  SELECT c.*, row_number() OVER (PARTITION BY c.ck ORDER BY c.priority DESC, c.pos, c.scheduled_at) AS r
  FROM cand c
),
f1 AS (
  SELECT r1.* FROM r1 LEFT JOIN ck_held h ON h.ck = r1.ck
  WHERE $8::int IS NULL OR r1.ck IS NULL OR r1.r <= $8::int - h.n
),
r2 AS (
  SELECT f1.*, row_number() OVER (PARTITION BY f1.rk ORDER BY f1.priority DESC, f1.pos, f1.scheduled_at) AS r_2
  FROM f1
),
f2 AS (
  SELECT r2.* FROM r2 LEFT JOIN rk_window w ON w.rk = r2.rk
  WHERE $11::int IS NULL OR r2.rk IS NULL OR r2.r_2 <= $11::int - w.n
),
r3 AS (
  SELECT f2.*, row_number() OVER (ORDER BY f2.priority DESC, f2.pos, f2.scheduled_at) AS r_3 FROM f2
),
chosen AS MATERIALIZED (
  SELECT r3.run_id, r3.node, r3.fk, r3.pos FROM r3, totals
  WHERE r3.r_3 <= least($4::int,
                        coalesce($7::int - totals.held, $4::int),
                        coalesce($9::int - totals.win, $4::int))
),
locked AS MATERIALIZED (
  -- Driven by the chosen steps, each locked by its primary key (LATERAL), in (run_id, node)
  -- order. The re-check is written with coalesce so that it does not imply the limited
  -- index's predicate: else, with a table not analyzed yet, the planner reads that whole index
  -- for each step (measured: 2.5 ms a step at 4,500 claimable).
  SELECT t.run_id, t.node
  FROM (SELECT run_id, node FROM chosen ORDER BY run_id, node) ch
  CROSS JOIN LATERAL (
    SELECT s.run_id, s.node FROM ${s}.cyclone_steps s
    WHERE s.run_id = ch.run_id AND s.node = ch.node AND s.${CLAIMABLE}
      AND coalesce(s.flow, 0) = 2
    FOR UPDATE SKIP LOCKED
  ) t
),
u AS (
  UPDATE ${s}.cyclone_steps t
  SET state = 'running', attempt = t.attempt + 1, lease_owner = $5,
      lease_expires_at = clock.t + make_interval(secs => $6::double precision / 1000),
      started_at = clock.t, updated_at = now()
  FROM locked l, clock WHERE t.run_id = l.run_id AND t.node = l.node
  RETURNING t.run_id, t.node, t.workflow, t.action, t.attempt, t.max_attempts, t.ancestors,
            t.snoozes, t.rate_limit_key, cardinality(t.downstream) = 0 AS leaf
),
logged AS (
  INSERT INTO ${s}.cyclone_rate_admissions (action, key, at)
  SELECT $1, coalesce(u.rate_limit_key, ''), clock.t FROM u, clock
  WHERE $9::int IS NOT NULL OR $11::int IS NOT NULL
),
pruned AS (
  DELETE FROM ${s}.cyclone_rate_admissions a
  WHERE ($9::int IS NOT NULL OR $11::int IS NOT NULL) AND a.action = $1
    AND a.at <= (SELECT t FROM clock) - make_interval(
      secs => greatest(coalesce($10::double precision, 0), coalesce($12::double precision, 0)) / 1000)
),
meta AS (
  SELECT
    coalesce((SELECT ch.fk FROM chosen ch ORDER BY ch.pos DESC LIMIT 1),
             (SELECT k.k FROM keys k ORDER BY k.pos DESC LIMIT 1)) AS cursor,
    CASE WHEN (SELECT count(*) FROM cand) > (SELECT count(*) FROM u) THEN
      least(
        (SELECT extract(epoch FROM (coalesce(totals.oldest, clock.t)
                  + make_interval(secs => $10::double precision / 1000) - clock.t)) * 1000
         FROM totals, clock
         WHERE $9::int IS NOT NULL AND totals.win + (SELECT count(*) FROM u) >= $9::int),
        (SELECT min(extract(epoch FROM (w.oldest
                  + make_interval(secs => $12::double precision / 1000) - clock.t)) * 1000)
         FROM rk_window w, clock WHERE w.n >= $11::int)
      )::float8
    END AS next_in_ms
)
SELECT u.run_id, u.node, u.workflow, u.action, u.attempt, u.max_attempts, u.snoozes, u.leaf,
  r.input AS run_input, r.traceparent,
  ${upstream(s)} AS upstream,
  NULL::text AS cursor, NULL::float8 AS next_in_ms
FROM u JOIN ${s}.cyclone_runs r ON r.id = u.run_id
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, meta.cursor,
  meta.next_in_ms
FROM meta`;

/** No upstream outputs: `{}` for a root, NULL (loaded step by step) for a step with ancestors. */
const NO_UPSTREAM = (_s: string) => `CASE WHEN cardinality(u.ancestors) = 0 THEN '{}'::jsonb END`;

/** The outputs of the completed ancestors of claimed step `u`, by node name. */
const UPSTREAM = (s: string) => `CASE WHEN cardinality(u.ancestors) = 0 THEN '{}'::jsonb ELSE
    (SELECT coalesce(jsonb_object_agg(a.node, a.output), '{}'::jsonb) FROM ${s}.cyclone_steps a
     WHERE a.run_id = u.run_id AND a.node = ANY(u.ancestors) AND a.state = 'completed') END`;

const claimLimitedStatement = defineStatement('claim_limited', claimLimitedSql);
const claimLimitedWithoutUpstreamStatement = defineStatement(
  'claim_limited_without_upstream',
  claimLimitedWithoutUpstreamSql,
);

/** One action's limits as the limited claim takes them (`ActionLimits` without the keys). */
export interface LimitValues {
  concurrency: number | null;
  keyedConcurrency: number | null;
  rate: { limit: number; periodMs: number } | null;
  keyedRate: { limit: number; periodMs: number } | null;
}

/** What `claimLimited` takes. */
export interface LimitedClaimParams {
  action: string;
  workflows: string[];
  nodeKeys: string[];
  want: number;
  workerId: string;
  leaseMs: number;
  limits: LimitValues;
  /** The fairness key this worker served last for the action; '' to begin. */
  cursor: string;
  maxKeys: number;
  perKey: number;
  /** Leave the upstream outputs out (`claimLimitedWithoutUpstreamSql`). */
  withoutUpstream?: boolean;
}

/** What `claimLimited` did. */
export interface LimitedClaim {
  steps: ClaimedStep[];
  /** The fairness key to start after next time. */
  cursor: string;
  /** When a step held back by a rate limit may start, ms; undefined when none was. */
  nextInMs: number | undefined;
}

/**
 * The limited claim of one action, in its own transaction on `on` (a dedicated connection):
 * BEGIN and the action's advisory lock (one round trip), the claim, COMMIT. `lockName` names the
 * lock (schema and
 * action).
 */
export async function claimLimited(
  on: Queryable,
  db: SqlScope,
  lockName: string,
  p: LimitedClaimParams,
): Promise<LimitedClaim> {
  try {
    // In the try: a lock wait that fails (cancelled, timed out) leaves the transaction aborted,
    // and the connection must not go back to its pool so.
    await on.query(beginLockedSql(actionLockKey(lockName)));
    const l = p.limits;
    const { rows } = await send<ClaimedStep & { cursor: string | null; next_in_ms: number | null }>(
      on,
      (p.withoutUpstream ? claimLimitedWithoutUpstreamStatement : claimLimitedStatement)(db),
      [
        p.action,
        p.workflows,
        p.nodeKeys,
        p.want,
        p.workerId,
        p.leaseMs,
        l.concurrency,
        l.keyedConcurrency,
        l.rate?.limit ?? null,
        l.rate?.periodMs ?? null,
        l.keyedRate?.limit ?? null,
        l.keyedRate?.periodMs ?? null,
        p.cursor,
        p.maxKeys,
        p.perKey,
      ],
    );
    await on.query('COMMIT');
    const steps: ClaimedStep[] = [];
    let cursor = p.cursor;
    let nextInMs: number | undefined;
    for (const row of rows) {
      if (row.run_id === null) {
        if (row.cursor !== null) cursor = row.cursor;
        if (row.next_in_ms !== null) nextInMs = Math.max(0, row.next_in_ms);
        continue;
      }
      const { cursor: _c, next_in_ms: _n, ...step } = row;
      steps.push(step);
    }
    return { steps, cursor, nextInMs };
  } catch (err) {
    await on.query('ROLLBACK').catch(() => {});
    throw err;
  }
}

/**
 * Due steps whose limit keys are to be resolved (flow 1) of the actions $1, of the workflows $2
 * and nodes $3 this worker knows, oldest first, at most $4, by `cyclone_steps_keys_pending`:
 * with the run input and the outputs of the completed ancestors (as the claim loads them), so
 * that the worker maps the node's input and computes the keys. Not locked: resolving a step
 * twice computes the same keys, and the update is fenced on `flow = 1`.
 */
export const selectKeysPendingSql = (s: string) => `
SELECT t.run_id, t.node, t.workflow, t.action, t.attempt, t.max_attempts, t.snoozes,
  r.input AS run_input, r.traceparent,
  CASE WHEN cardinality(t.ancestors) = 0 THEN '{}'::jsonb ELSE
    (SELECT coalesce(jsonb_object_agg(a.node, a.output), '{}'::jsonb) FROM ${s}.cyclone_steps a
     WHERE a.run_id = t.run_id AND a.node = ANY(t.ancestors) AND a.state = 'completed') END
    AS upstream
FROM (SELECT run_id, node, workflow, action, attempt, max_attempts, snoozes, ancestors
      FROM ${s}.cyclone_steps
      WHERE ${CLAIMABLE} AND flow = 1 AND scheduled_at <= now()
        AND action = ANY($1::text[]) AND workflow = ANY($2::text[])
        AND workflow || '/' || node = ANY($3::text[])
      ORDER BY scheduled_at
      LIMIT $4) t
JOIN ${s}.cyclone_runs r ON r.id = t.run_id`;

/**
 * Stores resolved keys: $1 run ids, $2 nodes, $3 concurrency keys, $4 rate-limit keys (NULL: no
 * key), in (run_id, node) order; each step still claimable with flow 1 becomes flow 2, claimable
 * by the limited claim. Workers are told (NOTIFY on $5 with the workflows $6).
 */
export const setKeysSql = (s: string) => `
WITH k AS (
  UPDATE ${s}.cyclone_steps t
  SET flow = 2, concurrency_key = i.ck, rate_limit_key = i.rk, updated_at = now()
  FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[]) AS i(run_id, node, ck, rk)
  -- coalesce: a re-check that does not imply cyclone_steps_keys_pending's predicate, so each
  -- step is found by its primary key (see the limited claim's \`locked\`).
  WHERE t.run_id = i.run_id AND t.node = i.node AND coalesce(t.flow, 0) = 1 AND t.${CLAIMABLE}
  RETURNING t.workflow
)
SELECT (SELECT count(*) FROM k)::int AS resolved,
  (SELECT count(pg_notify($5, w.workflow)) FROM (SELECT DISTINCT workflow FROM k) w)::int AS notified`;

/**
 * Discards a step whose limit key cannot be computed, fenced on `flow = 1` and a claimable
 * state, with error entry $3; moves the run's counters and fails the run when nothing else can
 * progress, as a failed attempt's discard does. $1 run id, $2 node.
 */
export const discardKeyStepSql = (s: string) => `
WITH f AS (
  UPDATE ${s}.cyclone_steps
  SET state = 'discarded', errors = errors || jsonb_build_array($3::jsonb),
      lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
  WHERE run_id = $1 AND node = $2 AND coalesce(flow, 0) = 1 AND ${CLAIMABLE}
  RETURNING state
), run AS (
  ${runStepDiscardedSql(s)}
  FROM f WHERE r.id = $1
  RETURNING r.state
)
SELECT f.state AS step_state, (SELECT state FROM run) AS run_state FROM f`;

const selectKeysPendingStatement = defineStatement('select_keys_pending', selectKeysPendingSql);
const setKeysStatement = defineStatement('set_keys', setKeysSql);
const discardKeyStepStatement = defineStatement('discard_key_step', discardKeyStepSql, false);

/** A step whose keys are to be resolved: as claimed, without a lease. */
export type KeysPendingStep = ClaimedStep;

/** Due steps of `actions` whose limit keys are to be resolved, at most `limit`. */
export async function selectKeysPending(
  on: Queryable,
  db: SqlScope,
  p: { actions: string[]; workflows: string[]; nodeKeys: string[]; limit: number },
): Promise<KeysPendingStep[]> {
  const { rows } = await send<KeysPendingStep>(on, selectKeysPendingStatement(db), [
    p.actions,
    p.workflows,
    p.nodeKeys,
    p.limit,
  ]);
  return rows;
}

/** A step's resolved keys (null: no key). */
export interface ResolvedKeys {
  runId: string;
  node: string;
  concurrencyKey: string | null;
  rateLimitKey: string | null;
}

/** Stores resolved keys. @returns how many steps became claimable by the limited claim. */
export async function setKeys(
  on: Queryable,
  db: SqlScope,
  keys: readonly ResolvedKeys[],
): Promise<number> {
  const sorted = [...keys].sort((a, b) =>
    a.runId === b.runId ? (a.node < b.node ? -1 : 1) : a.runId < b.runId ? -1 : 1,
  );
  const { rows } = await send<{ resolved: number }>(on, setKeysStatement(db), [
    sorted.map((k) => k.runId),
    sorted.map((k) => k.node),
    sorted.map((k) => k.concurrencyKey),
    sorted.map((k) => k.rateLimitKey),
    db.channel,
  ]);
  return rows[0]?.resolved ?? 0;
}

/**
 * Discards a step whose limit key cannot be computed, with `entry` (JSON text) in its errors.
 * @returns the step's and the run's new states, or undefined when the step had moved on.
 */
export async function discardKeyStep(
  on: Queryable,
  db: SqlScope,
  p: { runId: string; node: string; entry: string },
): Promise<{ step_state: string; run_state: string | null } | undefined> {
  const { rows } = await send<{ step_state: string; run_state: string | null }>(
    on,
    discardKeyStepStatement(db),
    [p.runId, p.node, p.entry],
  );
  return rows[0];
}

/** Running steps of limited action $1, by concurrency key (NULL: none). */
export const slotsHeldSql = (s: string) => `
SELECT concurrency_key AS key, count(*)::int AS n FROM ${s}.cyclone_steps
WHERE action = $1 AND state = 'running' AND flow > 0
GROUP BY concurrency_key`;

/**
 * Due steps of limited action $1 waiting to start, by concurrency and rate-limit key, reading
 * at most $2 steps of each flow (the resolved ones, and those whose keys are not resolved yet,
 * counted without a key).
 */
export const stepsWaitingSql = (s: string) => `
SELECT ck, rk, count(*)::int AS n FROM (
  (SELECT concurrency_key AS ck, rate_limit_key AS rk FROM ${s}.cyclone_steps
   WHERE action = $1 AND ${CLAIMABLE} AND flow = 2 AND scheduled_at <= now() LIMIT $2)
  UNION ALL
  (SELECT NULL, NULL FROM ${s}.cyclone_steps
   WHERE ${CLAIMABLE} AND flow = 1 AND scheduled_at <= now() AND action = $1 LIMIT $2)
) w GROUP BY ck, rk`;

/** Admissions of action $1 in the window of $2 ms that ends now, by rate-limit key ('' none). */
export const admissionsSql = (s: string) => `
SELECT key, count(*)::int AS n FROM ${s}.cyclone_rate_admissions
WHERE action = $1 AND at > clock_timestamp() - make_interval(secs => $2::double precision / 1000)
GROUP BY key`;

/** Every limit the workers recorded. */
export const selectRecordedLimitsSql = (s: string) =>
  `SELECT action, kind, keyed, "limit", period_ms FROM ${s}.cyclone_limits ORDER BY action, kind, keyed`;

/** Forgets the recorded limits of the actions $1 (a worker records its own again next). */
export const forgetLimitsSql = (s: string) =>
  `DELETE FROM ${s}.cyclone_limits WHERE action = ANY($1::text[])`;

/** Records limits: $1 actions, $2 kinds, $3 keyed, $4 limits, $5 periods ms (NULL: none). */
export const recordLimitsSql = (s: string) => `
INSERT INTO ${s}.cyclone_limits (action, kind, keyed, "limit", period_ms)
SELECT * FROM unnest($1::text[], $2::text[], $3::boolean[], $4::int[], $5::int[])
ON CONFLICT (action, kind, keyed) DO UPDATE
SET "limit" = excluded."limit", period_ms = excluded.period_ms, updated_at = now()`;

const slotsHeldStatement = defineStatement('slots_held', slotsHeldSql, false);
const stepsWaitingStatement = defineStatement('steps_waiting', stepsWaitingSql, false);
const admissionsStatement = defineStatement('admissions', admissionsSql, false);
const selectRecordedLimitsStatement = defineStatement(
  'select_recorded_limits',
  selectRecordedLimitsSql,
  false,
);
const forgetLimitsStatement = defineStatement('forget_limits', forgetLimitsSql, false);
const recordLimitsStatement = defineStatement('record_limits', recordLimitsSql, false);

/** Running steps of `action` by concurrency key (null: none). */
export async function slotsHeld(
  on: Queryable,
  db: SqlScope,
  action: string,
): Promise<{ key: string | null; n: number }[]> {
  return (await send<{ key: string | null; n: number }>(on, slotsHeldStatement(db), [action])).rows;
}

/** Due steps of `action` waiting to start, by keys, reading at most `cap` per flow. */
export async function stepsWaiting(
  on: Queryable,
  db: SqlScope,
  p: { action: string; cap: number },
): Promise<{ ck: string | null; rk: string | null; n: number }[]> {
  return (
    await send<{ ck: string | null; rk: string | null; n: number }>(on, stepsWaitingStatement(db), [
      p.action,
      p.cap,
    ])
  ).rows;
}

/** Admissions of `action` in the window of `periodMs` that ends now, by key ('' for none). */
export async function admissions(
  on: Queryable,
  db: SqlScope,
  p: { action: string; periodMs: number },
): Promise<{ key: string; n: number }[]> {
  return (
    await send<{ key: string; n: number }>(on, admissionsStatement(db), [p.action, p.periodMs])
  ).rows;
}

/** A limit as the workers recorded it (`cyclone_limits`). */
export interface RecordedLimit {
  action: string;
  kind: 'concurrency' | 'rate';
  keyed: boolean;
  limit: number;
  period_ms: number | null;
}

/** Every limit the workers recorded. */
export async function selectRecordedLimits(on: Queryable, db: SqlScope): Promise<RecordedLimit[]> {
  return (await send<RecordedLimit>(on, selectRecordedLimitsStatement(db), [])).rows;
}

/**
 * Records the limits of a worker's actions, in a transaction on `on` (a dedicated connection):
 * the recorded limits of `actions` are replaced by `limits`.
 */
export async function recordLimits(
  on: Queryable,
  db: SqlScope,
  p: { actions: string[]; limits: Omit<RecordedLimit, never>[] },
): Promise<void> {
  await on.query('BEGIN');
  try {
    await send(on, forgetLimitsStatement(db), [p.actions]);
    if (p.limits.length > 0) {
      await send(on, recordLimitsStatement(db), [
        p.limits.map((l) => l.action),
        p.limits.map((l) => l.kind),
        p.limits.map((l) => l.keyed),
        p.limits.map((l) => l.limit),
        p.limits.map((l) => l.period_ms),
      ]);
    }
    await on.query('COMMIT');
  } catch (err) {
    await on.query('ROLLBACK').catch(() => {});
    throw err;
  }
}
