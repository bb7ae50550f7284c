/**
 * A worker's two pools: one for steps (completion transactions, failures) and a small control
 * pool for the engine's own statements, so that handlers holding transactions never starve the
 * claims, heartbeats, sweeps and completion batches.
 */
import pg from 'pg';
import type { Client } from './client.js';
import { CONNECT_TIMEOUT_MS, type DeadConnectionSettings, ignoreLateErrors } from './db.js';
import type { Logger } from './logger.js';
import { isDirectSession } from './session.js';

/** The pools a worker runs on. */
export interface WorkerPools {
  /** Steps: completionTx, completion and failure statements. */
  pool: pg.Pool;
  /** Claims, heartbeats, the sweep, batched completions. */
  controlPool: pg.Pool;
  /** True when the worker made them and must end them; false for the client's own pool. */
  owned: boolean;
}

/**
 * Two pools of the worker's own when the client was made from a connection string (the step
 * pool of `poolSize` connections, the control pool of 3); else the client's pool for both.
 * `dead` says how their connections find a silent peer: keepalive on both, the query timeout on
 * the control pool only (the step pool runs handlers' queries, which may take as long as they
 * need), and the server's keepalive on both (not behind a transaction-pooling proxy).
 */
export function makeWorkerPools(
  client: Client,
  poolSize: number,
  log: Logger,
  leaseMs: number,
  dead: DeadConnectionSettings,
): WorkerPools {
  const url = client.connectionString;
  if (!url) return { pool: client.pool, controlPool: client.pool, owned: false };
  // The control pool runs the engine's own statements only (never a handler's query), with four
  // planner settings:
  // - no bitmap scans: right after a burst of submissions, before autovacuum has analyzed the
  //   table, the planner thinks the claimable backlog is tiny and would read all of it through
  //   a bitmap scan and a sort on every claim, instead of the claim index in scheduled_at order;
  // - generic plans: a statement over arrays (`unnest($1)`) is otherwise planned again on every
  //   execution, and at some batch sizes the per-call plan is a worse one, while the generic
  //   plan goes by the primary key at every size;
  // - no JIT compilation: a generic plan is costed for an unknown LIMIT (10 % of the candidates),
  //   so with 100,000 claimable steps the claim's estimate passed jit_above_cost and every claim
  //   was compiled anew (PostgreSQL 15 with LLVM: 135 ms instead of 20 for 500 steps, 29 instead
  //   of 1 for 20);
  // - no sequential scans where an index serves: a generic plan made while the tables were
  //   empty (a worker started on a new schema) stays cached until they are analyzed, which
  //   autovacuum may not do for a minute, or ever where it is off, and the claims, completions,
  //   heartbeats and sweeps planned on empty tables scanned every step version (claims 4x
  //   slower at 200,000 steps).
  // test/prepared.test.ts checks these plans. A session SET, not a startup option (PgBouncer
  // refuses unknown startup parameters); not sent when prepared statements are off, the sign of
  // a transaction-pooling proxy, where a session setting would land on whichever server
  // connection runs it. Three connections: a claim and a completion batch in flight, and one
  // for the heartbeat and the sweep. And no transaction of the engine's may sit idle on the
  // server longer than the lease (a worker cut off between a BEGIN and its next statement).
  const controlSql = client.db.prepare
    ? [
        {
          text: 'SET enable_bitmapscan = off; SET enable_seqscan = off; SET plan_cache_mode = force_generic_plan; SET jit = off',
        },
        {
          text: "SELECT set_config('idle_in_transaction_session_timeout', $1, false)",
          values: [String(Math.max(1, Math.ceil(leaseMs)))],
        },
        dead.serverSql,
      ]
    : undefined;
  const stepSql = client.db.prepare ? [dead.serverSql] : undefined;
  // The engine's statements (claims, heartbeats, sweeps, completion batches) answer within
  // milliseconds to seconds; one unanswered for the query timeout went into a dead connection.
  // The step pool pipelines (pg's `pipeline` option: a query is sent without waiting for the
  // answers to those before it), so that a completionTx's BEGIN goes out with the handler's
  // first query (completion-tx.ts). Handlers reach these connections only through `Tx.query`
  // (text and values), never with the portal queries (cursors, `rows`) pg refuses there.
  return {
    pool: makePool(
      url,
      poolSize,
      log,
      { keepAliveInitialDelayMillis: dead.keepAliveIdleMs, pipeline: true },
      stepSql,
    ),
    controlPool: makePool(
      url,
      3,
      log,
      { keepAliveInitialDelayMillis: dead.keepAliveIdleMs, query_timeout: dead.queryTimeoutMs },
      controlSql,
    ),
    owned: true,
  };
}

/**
 * One pool. `onConnectSql` runs on each new connection before it is handed out (pg-pool awaits
 * it); a failure is only logged: the settings are planner hints and bounds on idle transactions
 * and silent peers, and the statements work without them.
 */
function makePool(
  connectionString: string,
  max: number,
  log: Logger,
  liveness: { keepAliveInitialDelayMillis: number; query_timeout?: number; pipeline?: boolean },
  onConnectSql?: { text: string; values?: string[] }[],
): pg.Pool {
  const p = new pg.Pool({
    connectionString,
    max,
    connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
    keepAlive: true,
    ...liveness,
    ...(onConnectSql
      ? {
          onConnect: async (c: pg.ClientBase) => {
            // Session settings on a session of the server's own only: through a
            // transaction-pooling proxy they would stay on a server connection other clients get.
            if (!(await isDirectSession(c))) return;
            for (const q of onConnectSql) {
              await c.query(q.text, q.values).catch((err: Error) => {
                log.warn({ err: err.message }, `could not run "${q.text}"`);
              });
            }
          },
        }
      : {}),
  });
  p.on('error', (err) => log.warn({ err: err.message }, 'idle connection lost'));
  ignoreLateErrors(p);
  return p;
}
