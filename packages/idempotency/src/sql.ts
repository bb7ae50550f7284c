/**
 * Every statement on the ledger, in one place, so that one file answers "what touches the
 * ledger". Each takes the quoted schema (`client.db.q`) and returns SQL text; values always
 * travel as parameters. Every statement of the protocol touches the rows of one run (the primary
 * key leads with `run_id`), so none scans the table.
 *
 * The step fence — "the step is still `running` at this attempt", the predicate of
 * `ctx.assertLease()` — is embedded in each statement that lets a call through, so the fence
 * re-check and the `call_started_at` stamp are one atomic statement, committed before the call.
 */
import {
  joinRunSql,
  stepHeldSql,
  stepReopenedBetweenSql,
  stepRunningSql,
} from '@cyclone/core/internal';

/** The ledger table's name (in the configured schema). */
export const LEDGER_TABLE = 'cyclone_idempotency';

/**
 * Step 1 of `once`'s protocol, the fast path, in one round trip: inserts the key as `started`,
 * owned by this attempt, with the call stamped now — only while the step fence holds — and
 * returns `inserted = true`. When the key exists (committed before this statement), returns its
 * phase, request hash and result instead (`inserted = false`), so a replay of a `succeeded` row
 * needs no lock. No row at all: the fence failed, or a concurrent insert just committed; the
 * caller's locked path tells which.
 * $1 run_id, $2 key, $3 node, $4 scope, $5 provider, $6 operation, $7 request_hash, $8 attempt.
 */
export const insertStarted = (s: string) => `
WITH ins AS (
  INSERT INTO ${s}.${LEDGER_TABLE}
    (run_id, key, node, scope, provider, operation, request_hash, phase, owner_attempt,
     call_started_at, calls)
  SELECT $1, $2, $3, $4, $5, $6, $7, 'started', $8, now(), 1
  WHERE ${stepHeldSql(s, '$1', '$3', '$8')}
  ON CONFLICT (run_id, key) DO NOTHING
  RETURNING generation, calls
)
SELECT true AS inserted, generation, calls, NULL::text AS phase, NULL::text AS request_hash,
       NULL::jsonb AS result
FROM ins
UNION ALL
SELECT false, l.generation, l.calls, l.phase, l.request_hash, l.result
FROM ${s}.${LEDGER_TABLE} l
WHERE l.run_id = $1 AND l.key = $2 AND NOT EXISTS (SELECT 1 FROM ins)`;

/**
 * Locks an existing key's row (inside the claim transaction) and returns what the branch needs:
 * the row, the age of its call in ms by the database clock, and `discarded_since`: whether an
 * operator reopened the step (core's `reopened_after_attempt`, set by `retry`/`retryAll`) at an
 * attempt ≥ the row's owner and < this attempt, which means this attempt comes from an operator
 * retry.
 * $1 run_id, $2 key, $3 this attempt.
 */
export const lockRow = (s: string) => `
SELECT l.node, l.phase, l.request_hash, l.generation, l.owner_attempt, l.calls, l.result,
       l.error, l.provider_ref, l.call_started_at,
       (extract(epoch FROM (now() - l.call_started_at)) * 1000)::float8 AS call_age_ms,
       ${stepReopenedBetweenSql(s, 'l.run_id', 'l.node', 'l.owner_attempt', '$3')} AS discarded_since
FROM ${s}.${LEDGER_TABLE} l
WHERE l.run_id = $1 AND l.key = $2
FOR UPDATE OF l`;

/**
 * Takes the row over for a call by this attempt, fenced by the step: `started`, owned by this
 * attempt, call stamped now, `calls` + 1; `generation` + $5 (1 on an operator retry after a
 * definitive failure, else 0). $1 run_id, $2 key, $3 node, $4 attempt, $5 generation increment.
 */
export const takeOver = (s: string) => `
UPDATE ${s}.${LEDGER_TABLE} l
SET phase = 'started', owner_attempt = $4, generation = l.generation + $5,
    call_started_at = now(), calls = l.calls + 1, result = NULL, provider_ref = NULL,
    updated_at = now()
WHERE l.run_id = $1 AND l.key = $2 AND ${stepHeldSql(s, '$1', '$3', '$4')}
RETURNING generation, calls`;

/**
 * Takes ownership before a reconcile lookup, without stamping a call: `unknown`, owned by this
 * attempt, fenced by the step. $1 run_id, $2 key, $3 node, $4 attempt.
 */
export const ownForReconcile = (s: string) => `
UPDATE ${s}.${LEDGER_TABLE} l
SET phase = 'unknown', owner_attempt = $4, updated_at = now()
WHERE l.run_id = $1 AND l.key = $2 AND ${stepHeldSql(s, '$1', '$3', '$4')}
RETURNING generation, calls`;

/**
 * After a reconcile lookup found nothing: lets the re-call through, fenced by ownership,
 * generation, phase and the step. $1 run_id, $2 key, $3 node, $4 attempt, $5 generation.
 */
export const stampRecall = (s: string) => `
UPDATE ${s}.${LEDGER_TABLE} l
SET phase = 'started', call_started_at = now(), calls = l.calls + 1, updated_at = now()
WHERE l.run_id = $1 AND l.key = $2 AND l.owner_attempt = $4 AND l.generation = $5
  AND l.phase IN ('started', 'unknown') AND ${stepHeldSql(s, '$1', '$3', '$4')}
RETURNING generation, calls`;

/**
 * Policy `fail`: marks the outcome `unknown` (keeping an earlier error), inside the claim
 * transaction. $1 run_id, $2 key, $3 error jsonb.
 */
export const markUnknown = (s: string) => `
UPDATE ${s}.${LEDGER_TABLE}
SET phase = 'unknown', error = coalesce(error, $3::jsonb), updated_at = now()
WHERE run_id = $1 AND key = $2 AND phase IN ('started', 'unknown')`;

/**
 * Records `succeeded` with the result and the provider's reference. Fenced by generation and
 * phase (`started`/`unknown`) rather than by owner: an outcome already recorded is never
 * overwritten, but a superseded owner's success still lands on a row without an outcome —
 * the effect happened under this key, and hiding it would invite a second call.
 * $1 run_id, $2 key, $3 generation, $4 result jsonb, $5 provider_ref.
 */
export const recordSucceeded = (s: string) => `
UPDATE ${s}.${LEDGER_TABLE}
SET phase = 'succeeded', result = $4::jsonb, provider_ref = $5, updated_at = now()
WHERE run_id = $1 AND key = $2 AND generation = $3 AND phase IN ('started', 'unknown')
RETURNING owner_attempt`;

/**
 * Records the outcome of a failed call, fenced by owner, generation and phase `started`
 * (step 3 of `once`'s protocol). $1 run_id, $2 key, $3 attempt, $4 generation, $5 phase
 * (`failed`, `unknown` or `started`), $6 error jsonb, $7 keep the call stamp (false for not
 * sent: no call in flight any more).
 */
export const recordFailure = (s: string) => `
UPDATE ${s}.${LEDGER_TABLE}
SET phase = $5, error = $6::jsonb,
    call_started_at = CASE WHEN $7::boolean THEN call_started_at ELSE NULL END,
    updated_at = now()
WHERE run_id = $1 AND key = $2 AND owner_attempt = $3 AND generation = $4 AND phase = 'started'
RETURNING phase`;

/**
 * Records `failed` after a reconcile lookup found the call's trace of failure (the reconcile
 * function threw a definitive `OutcomeError`), fenced by ownership, generation, phase `unknown`
 * and the step. $1 run_id, $2 key, $3 node, $4 attempt, $5 generation, $6 error jsonb.
 */
export const recordReconciledFailure = (s: string) => `
UPDATE ${s}.${LEDGER_TABLE} l
SET phase = 'failed', error = $6::jsonb, updated_at = now()
WHERE l.run_id = $1 AND l.key = $2 AND l.owner_attempt = $4 AND l.generation = $5
  AND l.phase = 'unknown' AND ${stepHeldSql(s, '$1', '$3', '$4')}
RETURNING phase`;

/**
 * Clears the call stamp of a row this attempt stamped but did not call (the signal was aborted
 * in between). $1 run_id, $2 key, $3 attempt, $4 generation.
 */
export const unstamp = (s: string) => `
UPDATE ${s}.${LEDGER_TABLE}
SET call_started_at = NULL, calls = greatest(calls - 1, 0), updated_at = now()
WHERE run_id = $1 AND key = $2 AND owner_attempt = $3 AND generation = $4 AND phase = 'started'`;

/** One row by key. $1 run_id, $2 key. */
export const selectRow = (s: string) =>
  `SELECT * FROM ${s}.${LEDGER_TABLE} WHERE run_id = $1 AND key = $2`;

/** All rows of a run, by key. $1 run_id. */
export const selectRun = (s: string) =>
  `SELECT * FROM ${s}.${LEDGER_TABLE} WHERE run_id = $1 ORDER BY key`;

/**
 * Operator resolution (`resolveKey`), refused while the step is running.
 * $1 run_id, $2 key, $3 'succeeded' | 'not_sent', $4 result jsonb, $5 provider_ref.
 * `not_sent` on a `failed` row bumps the generation (a fresh native key); on `started`/`unknown`
 * it keeps it (an unknown outcome never changes the key).
 */
export const resolve = (s: string) => `
UPDATE ${s}.${LEDGER_TABLE} l
SET phase = CASE WHEN $3 = 'succeeded' THEN 'succeeded' ELSE 'started' END,
    result = CASE WHEN $3 = 'succeeded' THEN $4::jsonb ELSE NULL END,
    provider_ref = CASE WHEN $3 = 'succeeded' THEN $5 ELSE NULL END,
    generation = CASE WHEN $3 = 'not_sent' AND l.phase = 'failed' THEN l.generation + 1
                      ELSE l.generation END,
    call_started_at = CASE WHEN $3 = 'succeeded' THEN l.call_started_at ELSE NULL END,
    updated_at = now()
WHERE l.run_id = $1 AND l.key = $2 AND l.phase <> 'succeeded'
  AND NOT ${stepRunningSql(s, 'l.run_id', 'l.node')}
RETURNING l.phase, l.generation`;

/**
 * Retention: deletes up to $3 rows of runs in states $2 that finished before now() - $1 ms, in
 * one bounded statement (`SKIP LOCKED`: rows being written are left for the next pass). Returns
 * the number deleted.
 */
export const reap = (s: string) => `
WITH victims AS MATERIALIZED (
  SELECT l.run_id, l.key
  FROM ${s}.${LEDGER_TABLE} l ${joinRunSql(s, 'r', 'l.run_id')}
  WHERE r.state = ANY($2::text[]) AND r.completed_at IS NOT NULL
    AND r.completed_at < now() - make_interval(secs => $1::double precision / 1000)
  LIMIT $3
  FOR UPDATE OF l SKIP LOCKED
), gone AS (
  DELETE FROM ${s}.${LEDGER_TABLE} l USING victims v
  WHERE l.run_id = v.run_id AND l.key = v.key
  RETURNING 1
)
SELECT count(*)::int AS deleted FROM gone`;

/**
 * The unknown outcomes open (rows in phase `unknown`), counted up to $1: the one statement that
 * reads across runs at every metrics collection, so it goes by the partial index on them
 * (migration 000002) and stops at the cap.
 */
export const countUnknown = (s: string) => `
SELECT count(*)::int AS n FROM (
  SELECT 1 FROM ${s}.${LEDGER_TABLE} WHERE phase = 'unknown' LIMIT $1) capped`;

/** The operator UI's columns of a ledger row: bodies as JSON text, cut to $N characters. */
const uiColumns = (limit: string) => `run_id, key, node, scope, provider, operation, phase,
       generation, owner_attempt, calls, provider_ref, call_started_at, created_at, updated_at,
       left(result::text, ${limit}) AS result, octet_length(result::text) AS result_bytes,
       left(error::text, ${limit}) AS error`;

/**
 * The operator UI: a run's ledger rows by key ($1 run id, $2 result/error preview characters),
 * only node $3's when it is not NULL; by the primary key's run prefix.
 */
export const uiRunRows = (s: string) => `
SELECT ${uiColumns('$2')} FROM ${s}.${LEDGER_TABLE}
WHERE run_id = $1 AND ($3::text IS NULL OR node = $3)
ORDER BY key`;

/**
 * The operator UI: the unknown outcomes last updated at least $1 ms ago, oldest first, after the
 * keyset position ($2 updated_at, $3 run id, $4 key; NULLs for the first page), at most $5, bodies
 * cut to $6 characters: by the partial index on unknown outcomes (migration 000002).
 */
export const uiUnknownRows = (s: string) => `
SELECT ${uiColumns('$6')}, to_json(updated_at) #>> '{}' AS updated_key
FROM ${s}.${LEDGER_TABLE}
WHERE phase = 'unknown' AND updated_at <= now() - $1::float8 * interval '1 millisecond'
  AND ($2::timestamptz IS NULL OR (updated_at, run_id, key) > ($2::timestamptz, $3::uuid, $4::text))
ORDER BY updated_at, run_id, key LIMIT $5`;

/** The operator UI's go-to box: the run and node of key $2 of run $1 (the primary key). */
export const uiFindKey = (s: string) => `
SELECT run_id, node FROM ${s}.${LEDGER_TABLE} WHERE run_id = $1 AND key = $2`;

/** Whether the ledger table exists in the schema ($1: its qualified name, as text). */
export const ledgerExists = (_s: string) => 'SELECT to_regclass($1) IS NOT NULL AS present';
