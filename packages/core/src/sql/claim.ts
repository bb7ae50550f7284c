/** The claim: the statement that leases claimable steps to a worker. */
import type { Json } from '../types.js';
import { defineStatement, type Queryable, type SqlScope, send } from './statement.js';

/**
 * Claims up to $2 claimable steps of the workflows $1 for worker $3 with a lease of $4 ms, only
 * of the nodes $5 (`workflow/node`) the worker knows: during a rolling deploy an older worker
 * leaves a node that only the new version has to the new workers. Only steps of actions without
 * limits (`flow = 0`); the limited claim (`sql/flow.ts`) takes the others.
 * Higher priority first, then earlier `scheduled_at`: the priorities present among claimable
 * steps are found by a loose index scan (`p`: one probe of the claim index per distinct value),
 * and each is read from its due end (`priority = p AND scheduled_at <= now()`, a range that stops
 * at the first future row), so a backlog of future-dated steps, of any priority, is never read.
 * Each priority's candidates are locked in the LATERAL subquery (`FOR UPDATE SKIP LOCKED`, so a
 * row another claim holds is passed over and the next taken), then the best $2 of them are kept
 * in a MATERIALIZED CTE, and the UPDATE joins to them, so LIMIT really limits (an UPDATE … WHERE
 * id IN (SELECT … LIMIT) may lock and update more rows than the limit); a candidate locked but
 * not kept is released when the statement ends. The kept keys reach the UPDATE as two arrays
 * unnested (`k`), which the planner counts as a few rows, so it finds each step by its primary
 * key: joined to the CTE itself (counted as 10 % of the candidates under a generic plan), an
 * analyzed table made it hash the whole of `cyclone_steps`, finished steps included, on every
 * claim (9 of a 500-step claim's 17 ms at 20,000 steps). The attempt it sets is the claim's fencing
 * token. Returns the run input, the outputs of completed ancestors, the run's trace context, and
 * `leaf`: the step's node has no downstream node (from the row's `downstream`, fixed at submit,
 * not from the worker's definitions, which may differ during a rolling deploy).
 */
export const claimStepsSql = (s: string) => claimFrom(s, WITH_UPSTREAM);

/**
 * The distinct priorities of the claimable steps of flow 0, highest first, by a loose index scan
 * of the claim index (the recursive part of a `WITH RECURSIVE`, named `p`); a final NULL row ends
 * it.
 */
export const PRIORITIES = (s: string) => `p AS (
  (SELECT priority FROM ${s}.cyclone_steps
   WHERE state IN ('available', 'retryable', 'scheduled') AND flow = 0
   ORDER BY priority DESC LIMIT 1)
  UNION ALL
  SELECT (SELECT t.priority FROM ${s}.cyclone_steps t
          WHERE t.state IN ('available', 'retryable', 'scheduled') AND t.flow = 0
            AND t.priority < p.priority
          ORDER BY t.priority DESC LIMIT 1)
  FROM p WHERE p.priority IS NOT NULL
)`;

/**
 * The claim over the upstream expression `upstream` (WITH_UPSTREAM or WITHOUT_UPSTREAM) for the
 * owners `shares`: ONE_WORKER (the worker $3 takes every row) or SHARED (`claimStepsSharedSql`).
 */
const claimFrom = (
  s: string,
  upstream: typeof WITH_UPSTREAM | typeof WITHOUT_UPSTREAM,
  shares: Shares = ONE_WORKER,
) => `
WITH RECURSIVE ${PRIORITIES(s)}, c AS MATERIALIZED (
  SELECT x.run_id, x.node FROM p CROSS JOIN LATERAL (
    SELECT run_id, node, scheduled_at FROM ${s}.cyclone_steps
    WHERE state IN ('available', 'retryable', 'scheduled') AND flow = 0
      AND priority = p.priority AND scheduled_at <= now()
      AND workflow = ANY($1::text[]) AND workflow || '/' || node = ANY($5::text[])
    ORDER BY scheduled_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
  ) x
  ORDER BY p.priority DESC, x.scheduled_at
  LIMIT $2
)${shares.ctes}, k AS (
  SELECT array_agg(c.run_id) AS ids, array_agg(c.node) AS nodes${shares.agg} FROM ${shares.rows}
), u AS (
  UPDATE ${s}.cyclone_steps t
  SET state = 'running', attempt = t.attempt + 1, lease_owner = ${shares.value},
      lease_expires_at = now() + make_interval(secs => $4::double precision / 1000),
      started_at = now(), updated_at = now()
  FROM k, unnest(k.ids, k.nodes${shares.unnest}) AS c(run_id, node${shares.column})
  WHERE t.run_id = c.run_id AND t.node = c.node
  RETURNING t.run_id, t.node, t.workflow, t.action, t.attempt, t.max_attempts, t.ancestors,
            t.snoozes, t.lease_owner, cardinality(t.downstream) = 0 AS leaf
)
SELECT u.run_id, u.node, u.workflow, u.action, u.attempt, u.max_attempts, u.snoozes, u.lease_owner,
  u.leaf, r.input AS run_input, r.traceparent,
  ${upstream(s)}
FROM u JOIN ${s}.cyclone_runs r ON r.id = u.run_id`;

/**
 * Who owns the claimed rows, as SQL fragments of `claimFrom`: `ctes` after the claim's `c`,
 * `rows` the claimed rows `k` aggregates (as `c`), `agg` what else it aggregates, `unnest` and
 * `column` what its unnest adds, `value` the lease owner the UPDATE sets.
 */
interface Shares {
  ctes: string;
  rows: string;
  agg: string;
  unnest: string;
  column: string;
  value: string;
}

/** The claim of one worker: the worker $3 owns every row. */
const ONE_WORKER: Shares = { ctes: '', rows: 'c', agg: '', unnest: '', column: '', value: '$3' };

/**
 * The claim of several workers (`w`): worker $3[i] takes $6[i] slots, and the claimed rows,
 * numbered 1 to n (`cn.rn`, n at most $2, the sum of the slots), go to the workers in array
 * order, each up to its slots (`hi` is the last row number of a worker's share), so every row has
 * exactly one owner, the lease owner the UPDATE sets.
 */
const SHARED: Shares = {
  ctes: `, cn AS (
  SELECT run_id, node, row_number() OVER () AS rn FROM c
), w AS (
  SELECT o.id, o.slots, sum(o.slots) OVER (ORDER BY o.ord) AS hi
  FROM unnest($3::text[], $6::int[]) WITH ORDINALITY AS o(id, slots, ord)
)`,
  rows: 'cn c JOIN w ON c.rn > w.hi - w.slots AND c.rn <= w.hi',
  agg: ', array_agg(w.id) AS owners',
  unnest: ', k.owners',
  column: ', owner',
  value: 'c.owner',
};

/**
 * The claim of several workers on one pool in one statement: as `claimStepsSql`, but $3 is the
 * workers' ids (text[]) and $6 their free slots (int[], in the same order), $2 their sum; each
 * claimed row is leased to one of them (`lease_owner`, returned), the first rows in claim order to
 * the first worker up to its slots, and so on, so no worker gets more than it asked for.
 */
export const claimStepsSharedSql = (s: string) => claimFrom(s, WITH_UPSTREAM, SHARED);
/** `claimStepsSharedSql` without the upstream outputs (see `claimStepsWithoutUpstreamSql`). */
export const claimStepsSharedWithoutUpstreamSql = (s: string) =>
  claimFrom(s, WITHOUT_UPSTREAM, SHARED);

const WITH_UPSTREAM = (s: string) => `CASE WHEN cardinality(u.ancestors) = 0 THEN '{}'::jsonb ELSE
  (SELECT coalesce(jsonb_object_agg(a.node, a.output), '{}'::jsonb) FROM ${s}.cyclone_steps a
   WHERE a.run_id = u.run_id AND a.node = ANY(u.ancestors) AND a.state = 'completed') END AS upstream`;
const WITHOUT_UPSTREAM = (_s: string) =>
  `CASE WHEN cardinality(u.ancestors) = 0 THEN '{}'::jsonb END AS upstream`;

/**
 * The claim without the upstream outputs: `upstream` is NULL for a step with ancestors, to be
 * loaded step by step (`selectUpstream`). The fallback when the claim itself fails on a limit
 * of PostgreSQL's (one step's upstream outputs over the 256 MiB a JSON value may hold), so that
 * one such step never stops the claims of everything else.
 */
export const claimStepsWithoutUpstreamSql = (s: string) => claimFrom(s, WITHOUT_UPSTREAM);

/**
 * The outputs of the completed nodes $2 (text[]) of run $1, as one JSON object by node name.
 */
export const selectUpstreamSql = (s: string) =>
  `SELECT coalesce(jsonb_object_agg(a.node, a.output), '{}'::jsonb) AS upstream
   FROM ${s}.cyclone_steps a WHERE a.run_id = $1 AND a.node = ANY($2::text[]) AND a.state = 'completed'`;

/** A step as the claim returns it: leased to the worker at `attempt`, with what its handler needs. */
export interface ClaimedStep {
  run_id: string;
  node: string;
  workflow: string;
  action: string;
  /** The claim's fencing token. */
  attempt: number;
  max_attempts: number;
  /** Snoozes the step took before this attempt. */
  snoozes: number;
  run_input: Json;
  /**
   * Outputs of the node's completed ancestors, by node name; null when the claim left them to be
   * loaded on their own (`claimStepsWithoutUpstream`).
   */
  upstream: Record<string, Json> | null;
  /** The W3C traceparent of the span that submitted the run; null when none was recording. */
  traceparent: string | null;
  /** The worker the step is leased to (returned by the plain and shared claims). */
  lease_owner?: string;
  /**
   * True when the step's node has no downstream node (`cardinality(downstream) = 0` on the step
   * row): its completion takes the leaf form. Every claim returns it; absent (a step read
   * without a claim, as one whose limit keys are pending) counts as false.
   */
  leaf?: boolean;
}

const claimStepsStatement = defineStatement('claim_steps', claimStepsSql);
const claimStepsWithoutUpstreamStatement = defineStatement(
  'claim_steps_without_upstream',
  claimStepsWithoutUpstreamSql,
);
const claimStepsSharedStatement = defineStatement('claim_steps_shared', claimStepsSharedSql);
const claimStepsSharedWithoutUpstreamStatement = defineStatement(
  'claim_steps_shared_without_upstream',
  claimStepsSharedWithoutUpstreamSql,
);
const selectUpstreamStatement = defineStatement('select_upstream', selectUpstreamSql, false);

/** What `claimSteps` takes. */
export interface ClaimParams {
  workflows: string[];
  limit: number;
  workerId: string;
  leaseMs: number;
  /** `workflow/node` of every node the worker can run. */
  nodeKeys: string[];
}

/** `claimSteps` without the upstream outputs; see `claimStepsWithoutUpstreamSql`. */
export async function claimStepsWithoutUpstream(
  on: Queryable,
  db: SqlScope,
  p: ClaimParams,
): Promise<ClaimedStep[]> {
  const { rows } = await send<ClaimedStep>(
    on,
    claimStepsWithoutUpstreamStatement(db),
    claimValues(p),
  );
  return rows;
}

/** The claim's parameters in statement order ($1 workflows … $5 node keys). */
const claimValues = (p: ClaimParams) => [p.workflows, p.limit, p.workerId, p.leaseMs, p.nodeKeys];

/** The outputs of `run`'s completed nodes among `nodes`, by node name. */
export async function selectUpstream(
  on: Queryable,
  db: SqlScope,
  p: { runId: string; nodes: readonly string[] },
): Promise<Record<string, Json>> {
  const { rows } = await send<{ upstream: Record<string, Json> }>(on, selectUpstreamStatement(db), [
    p.runId,
    p.nodes,
  ]);
  return rows[0]?.upstream ?? {};
}

/** Leases up to `limit` claimable steps of `workflows` (only of `nodeKeys`) to `workerId`. */
export async function claimSteps(
  on: Queryable,
  db: SqlScope,
  p: ClaimParams,
): Promise<ClaimedStep[]> {
  const { rows } = await send<ClaimedStep>(on, claimStepsStatement(db), claimValues(p));
  return rows;
}

/** What `claimStepsShared` takes: the workers' ids and free slots, in the order they are served. */
export interface SharedClaimParams {
  workflows: string[];
  workerIds: string[];
  slots: number[];
  leaseMs: number;
  /** `workflow/node` of every node the workers can run (the same for all of them). */
  nodeKeys: string[];
  /** Claim without the upstream outputs (see `claimStepsWithoutUpstreamSql`). */
  withoutUpstream?: boolean;
}

/**
 * Leases up to the sum of `slots` claimable steps, each to one of `workerIds` and at most
 * `slots[i]` to `workerIds[i]` (the row's `lease_owner`).
 */
export async function claimStepsShared(
  on: Queryable,
  db: SqlScope,
  p: SharedClaimParams,
): Promise<ClaimedStep[]> {
  const statement = p.withoutUpstream
    ? claimStepsSharedWithoutUpstreamStatement(db)
    : claimStepsSharedStatement(db);
  const limit = p.slots.reduce((a, b) => a + b, 0);
  const { rows } = await send<ClaimedStep>(on, statement, [
    p.workflows,
    limit,
    p.workerIds,
    p.leaseMs,
    p.nodeKeys,
    p.slots,
  ]);
  return rows;
}

/**
 * How long until the next claimable step of the workflows $1 (only the nodes $2) is due, in ms
 * by the database's clock (≤ 0: one is due already, say one that came due just after a claim
 * looked, or one another worker holds locked right now); no row when none is waiting. Steps of
 * flow 0 by priority (the claim's loose scan, then the first row of each priority), and steps
 * whose limit keys are still to be resolved (flow 1); of the limited steps (flow 2) only those
 * due later (a delay, a snooze, a backoff), since one due now but held back by a limit would
 * make the loop spin: the limited claim says when a rate limit lets one start, and a freed slot
 * is seen at the next poll. Each read stops at its first matching row.
 */
export const nextDueSql = (s: string) => `
WITH RECURSIVE ${PRIORITIES(s)}
SELECT min(d.due_in_ms) AS due_in_ms FROM (
  SELECT x.due_in_ms FROM p CROSS JOIN LATERAL (
    SELECT (extract(epoch FROM (scheduled_at - now())) * 1000)::float8 AS due_in_ms
    FROM ${s}.cyclone_steps
    WHERE state IN ('available', 'retryable', 'scheduled') AND flow = 0
      AND priority = p.priority AND scheduled_at < 'infinity'
      AND workflow = ANY($1::text[]) AND workflow || '/' || node = ANY($2::text[])
    ORDER BY scheduled_at
    LIMIT 1) x
  UNION ALL
  (SELECT (extract(epoch FROM (scheduled_at - now())) * 1000)::float8
   FROM ${s}.cyclone_steps
   WHERE state IN ('available', 'retryable', 'scheduled') AND flow = 1
     AND workflow = ANY($1::text[]) AND workflow || '/' || node = ANY($2::text[])
   ORDER BY scheduled_at
   LIMIT 1)
  UNION ALL
  (SELECT (extract(epoch FROM (scheduled_at - now())) * 1000)::float8
   FROM ${s}.cyclone_steps
   WHERE state IN ('available', 'retryable', 'scheduled') AND flow = 2
     AND scheduled_at > now() AND scheduled_at < 'infinity'
     AND workflow = ANY($1::text[]) AND workflow || '/' || node = ANY($2::text[])
   ORDER BY scheduled_at
   LIMIT 1)
) d
HAVING count(*) > 0`;

const nextDueStatement = defineStatement('next_due', nextDueSql);

/**
 * Limits for the rest of the current transaction: how long a statement waits for a lock ($1 ms)
 * and how long the transaction may sit idle on the server ($2 ms).
 */
export const localLimitsSql = (_s: string) =>
  `SELECT set_config('lock_timeout', $1::text, true),
          set_config('idle_in_transaction_session_timeout', $2::text, true)`;
const localLimitsStatement = defineStatement('local_limits', localLimitsSql, false);

/**
 * Milliseconds until the worker's next step is due (its time by the database's clock), or
 * undefined when none of its workflows has a step waiting for its time. With `lockTimeoutMs` and
 * `idleLimitMs`, `on` is a transaction, limited first (`localLimitsSql`).
 */
export async function nextDueIn(
  on: Queryable,
  db: SqlScope,
  p: { workflows: string[]; nodeKeys: string[]; lockTimeoutMs?: number; idleLimitMs?: number },
): Promise<number | undefined> {
  if (p.lockTimeoutMs !== undefined && p.idleLimitMs !== undefined) {
    await send(
      on,
      localLimitsStatement(db),
      [String(p.lockTimeoutMs), String(Math.max(1, Math.ceil(p.idleLimitMs)))],
      true,
    );
  }
  const { rows } = await send<{ due_in_ms: number }>(on, nextDueStatement(db), [
    p.workflows,
    p.nodeKeys,
  ]);
  return rows[0]?.due_in_ms;
}
