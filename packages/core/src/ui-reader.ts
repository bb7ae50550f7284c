/**
 * The operator UI's reads (`@cyclone/ui` through `@cyclone/core/internal`): a reader with its
 * own small pool, each read one read-only transaction under a statement timeout, so that a page
 * left open can neither write nor hold the engine's connections or run a query for long. The
 * statements are in `sql/ui.ts` and `sql/registry.ts`; their results are mapped here to plain,
 * JSON-ready objects: timestamps as ISO-8601 UTC strings, payloads as JSON text.
 */
import pg from 'pg';
import type { Client } from './client.js';
import { CONNECT_TIMEOUT_MS, withConnection } from './db.js';
import { ConfigError, CycloneError } from './errors.js';
import { channelOf, DEFAULT_SCHEMA, quoteSchema } from './schema.js';
import * as registrySql from './sql/registry.js';
import type { Queryable, SqlScope } from './sql/statement.js';
import * as uiSql from './sql/ui.js';
import { RUN_STATES, type RunStateFilter } from './sql/ui.js';
import type { RunState, StepState } from './types.js';
import { WORKER_ALIVE_WITHIN_MS } from './workers.js';

/** An ISO-8601 UTC timestamp (`2026-12-01T18:00:00.000Z`). */
export type IsoTime = string;

/** A count that stops at a cap: `capped` means "at least `count`". */
export interface CappedCount {
  count: number;
  capped: boolean;
}

/** A run in a list. */
export interface UiRunRow {
  runId: string;
  workflow: string;
  state: RunState;
  submitKey: string | null;
  stepsRemaining: number;
  createdAt: IsoTime;
  completedAt: IsoTime | null;
}

/** The overview page. Counts stop at the reader's `countCap`. */
export interface UiOverview {
  /** The database's clock when read. */
  at: IsoTime;
  runs: {
    running: CappedCount;
    failed: CappedCount;
    /** Failed runs created in the last 24 h. */
    failedLast24h: CappedCount;
    /** All runs, as the planner estimates them (`pg_class.reltuples`; approximate). */
    estimatedTotal: number;
  };
  steps: {
    /** Claimable and due now. */
    ready: CappedCount;
    /** Waiting for a retry after a failed attempt (due or not). */
    retrying: CappedCount;
    /** Claimable later (delayed, snoozed, backing off, waiting for a signal). */
    scheduled: CappedCount;
    /** Held by a worker. */
    running: CappedCount;
    /** How long the oldest ready step has been due, ms (0 when none is). */
    queueLagMs: number;
    /** Leases expired and not yet recovered by a sweep. */
    expiredLeases: CappedCount;
  };
  /** The newest 10 failed runs. */
  recentFailed: UiRunRow[];
  workers: {
    /** Registered workers seen within 15 s. */
    alive: number;
  };
}

/** The filters and position of a runs page. */
export interface UiRunsFilter {
  state?: RunState;
  workflow?: string;
  /** Runs created at or after this time. */
  from?: IsoTime;
  /** Runs created before this time. */
  to?: IsoTime;
  /** A `next` or `prev` cursor of an earlier page; none for the newest page. */
  cursor?: string;
  /** With `cursor`: `older` (after a `next`, the default) or `newer` (after a `prev`). */
  dir?: 'older' | 'newer';
  /** Runs per page, 1 to 200. Default 50. */
  limit?: number;
}

/** A page of runs, newest first. */
export interface UiRunsPage {
  items: UiRunRow[];
  /** The cursor of the next older page (pass with `dir: 'older'`); null when there is none. */
  next: string | null;
  /** The cursor of the next newer page (pass with `dir: 'newer'`); null on the newest page. */
  prev: string | null;
}

/** What the go-to box found. */
export interface UiLookupHit {
  /** `run`: the text is a run id; `submitKey`: a run's submit key (in some workflow). */
  kind: 'run' | 'submitKey';
  runId: string;
  workflow: string;
}

/** A step without its bodies. */
export interface UiStepSummary {
  node: string;
  action: string;
  state: StepState;
  attempt: number;
  maxAttempts: number;
  depsRemaining: number;
  /** The nodes it depends on directly. */
  upstream: string[];
  /** The nodes that depend on it directly. */
  downstream: string[];
  /** Every node it depends on, directly or not. */
  ancestors: string[];
  scheduledAt: IsoTime;
  leaseOwner: string | null;
  leaseExpiresAt: IsoTime | null;
  startedAt: IsoTime | null;
  completedAt: IsoTime | null;
  /** completedAt − startedAt of its last attempt, ms; null unless both are set. */
  durationMs: number | null;
  /** Error entries stored (one per failed attempt). */
  errorCount: number;
  /** The newest error's message, its first 300 characters. */
  lastError: string | null;
  lastErrorKind: string | null;
  /** The output's stored size in bytes (compressed when large); null when it has none. */
  outputBytes: number | null;
  snoozes: number;
  /** A wait node's signal name. */
  waitFor: string | null;
  /** The attempt at which an operator last reopened it; null if never. */
  reopenedAfterAttempt: number | null;
}

/** A run with its steps. */
export interface UiRunDetail {
  run: UiRunRow & {
    stepsActive: number;
    /** All its steps, however many `steps` carries. */
    stepsTotal: number;
    updatedAt: IsoTime;
    /** The input's stored size in bytes. */
    inputBytes: number;
    debounceKey: string | null;
    traceparent: string | null;
  };
  /** In topological order, then by name; at most `maxSteps`. */
  steps: UiStepSummary[];
  /** More steps than `maxSteps`: the rest were left out. */
  truncated: boolean;
}

/** A JSON payload as text, whole or its beginning. */
export interface UiPayload {
  /** The JSON text, or its first `previewChars` characters when `truncated`. */
  text: string;
  /** Bytes of the whole JSON text (UTF-8). */
  bytes: number;
  /** `text` is a prefix, not valid JSON: fetch the whole payload to see it. */
  truncated: boolean;
}

/** An error entry of a step (one failed attempt), as stored (message ≤ 2,000, stack ≤ 4,000 chars). */
export interface UiStepError {
  attempt: number | null;
  at: IsoTime | null;
  kind: string | null;
  message: string;
  stack: string | null;
}

/** A step in full. */
export interface UiStepDetail extends UiStepSummary {
  /** The newest error entries, newest first (at most `maxErrors`). */
  errors: UiStepError[];
  /** The output; null when it has none. */
  output: UiPayload | null;
  /** A wait node whose signal arrived. */
  signalled: boolean;
  /** A wait node's deadline. */
  waitDeadline: IsoTime | null;
  /** The node's timer, ms. */
  delayMs: number;
}

/** A throughput chart's window. */
export type UiThroughputWindow = '1h' | '24h' | '7d';

/** Step outcomes per time bucket, counted by the workers (`cyclone_throughput`). */
export interface UiThroughput {
  window: UiThroughputWindow;
  /** The bucket width: 60,000 (1h), 300,000 (24h) or 3,600,000 ms (7d). */
  bucketMs: number;
  /**
   * Every bucket of the window, oldest first (zeros included); `t` is its start. `completed`:
   * attempts that completed (or skipped) their step; `failed`: attempts that failed (retryable
   * or discarded); `discarded`: of those, the ones that discarded the step.
   */
  points: { t: IsoTime; completed: number; failed: number; discarded: number }[];
}

/** A workflow that has runs. */
export interface UiWorkflow {
  workflow: string;
  /** Its running runs, among the first `countCap` running runs of all workflows. */
  running: CappedCount;
  /** Its failed runs, among the first `countCap` failed runs of all workflows. */
  failed: CappedCount;
  /** Its newest run's creation time. */
  lastCreatedAt: IsoTime | null;
}

/** A registered worker (`cyclone_workers`). */
export interface UiWorker {
  workerId: string;
  host: string;
  pid: number;
  startedAt: IsoTime;
  lastSeenAt: IsoTime;
  concurrency: number;
  inFlight: number;
  workflows: string[];
  version: string | null;
  /** Seen within 15 s. */
  alive: boolean;
}

/** The health page. */
export interface UiHealth {
  at: IsoTime;
  workers: UiWorker[];
  /** Steps leased per lease owner (a worker id), with the next expiry and the expired ones. */
  leaseOwners: { owner: string; steps: number; nextExpiry: IsoTime | null; expired: number }[];
  /** Leases expired and not yet recovered by a sweep. */
  expiredLeases: CappedCount;
  retrying: CappedCount;
  /**
   * Per workflow and action, among the first `countCap` claimable steps of each flow (earliest
   * first): the oldest due step's due time and lag, and how many are due. Oldest first.
   */
  oldestDueByAction: {
    workflow: string;
    action: string;
    oldestDueAt: IsoTime;
    lagMs: number;
    due: number;
  }[];
}

/** Options of `createUiReader`. Give `client` or `connectionString`. */
export interface UiReaderOptions {
  /** Connection settings (its connectionString, or its pool's options) and schema from it. */
  client?: Client;
  /** A PostgreSQL URL, instead of `client`. */
  connectionString?: string;
  /** Schema of Cyclone's tables. Default: the client's, else `cyclone`. */
  schema?: string;
  /** Connections of the reader's own pool. Default 3. */
  max?: number;
  /** Longest a read may run (ms) before it is cancelled with `QueryTimeoutError`. Default 5,000. */
  statementTimeoutMs?: number;
  /** Where counts stop (`CappedCount`). Default 10,000. */
  countCap?: number;
}

/** A UI read ran past the reader's statement timeout and was cancelled. */
export class QueryTimeoutError extends CycloneError {
  constructor(
    readonly timeoutMs: number,
    options?: { cause?: unknown },
  ) {
    super('QUERY_TIMEOUT', `the query ran longer than ${timeoutMs} ms and was cancelled`, options);
  }
}

/** A UI read was asked with a bad filter, cursor or window. */
export class BadQueryError extends CycloneError {
  constructor(message: string) {
    super('BAD_QUERY', message, { retryable: false });
  }
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const WINDOWS: Record<UiThroughputWindow, { bucketSeconds: number; windowSeconds: number }> = {
  '1h': { bucketSeconds: 60, windowSeconds: 3_600 },
  '24h': { bucketSeconds: 300, windowSeconds: 86_400 },
  '7d': { bucketSeconds: 3_600, windowSeconds: 604_800 },
};

/** The operator UI's reads: one read-only transaction each, on the reader's own pool. */
export interface UiReader {
  /** The schema, quoted for SQL (what the @cyclone/idempotency read functions take). */
  readonly q: string;
  /** The schema name. */
  readonly schema: string;
  /**
   * Runs `fn` in one read-only transaction (repeatable read, so its statements see one
   * snapshot) under the statement timeout, on the reader's pool.
   * @throws QueryTimeoutError when a statement ran past the timeout; `fn`'s errors.
   */
  read<T>(fn: (q: Queryable) => Promise<T>): Promise<T>;
  /** Capped counts of runs, steps and leases, the queue lag, the newest failed runs. */
  overview(): Promise<UiOverview>;
  /**
   * Step outcomes per bucket over the window, of one workflow or of all.
   * @throws BadQueryError for an unknown window.
   */
  throughput(o: { window: UiThroughputWindow; workflow?: string }): Promise<UiThroughput>;
  /**
   * One page of runs, newest first, by keyset on (created_at, id).
   * @throws BadQueryError for an unknown state, a bad time, cursor or limit.
   */
  listRuns(f?: UiRunsFilter): Promise<UiRunsPage>;
  /**
   * The run whose id is `q`, the runs whose submit key is `q` (in any workflow, at most 20), and
   * the run of workflow `w` with submit key `k` when `q` is `w:k`.
   */
  lookup(q: string): Promise<UiLookupHit[]>;
  /** A run and its step summaries (at most `maxSteps`, default 2,000); null when none. */
  getRun(runId: string, o?: { maxSteps?: number }): Promise<UiRunDetail | null>;
  /** A run's input (whole up to `previewChars`, default 65,536); null when no such run. */
  runInput(runId: string, o?: { previewChars?: number }): Promise<UiPayload | null>;
  /**
   * One step with its newest errors (`maxErrors`, default 20) and its output (whole up to
   * `previewChars`, default 65,536); null when no such step.
   */
  getStep(
    runId: string,
    node: string,
    o?: { previewChars?: number; maxErrors?: number },
  ): Promise<UiStepDetail | null>;
  /** A step's whole output as JSON text (`text` null: no output yet); null when no such step. */
  stepOutput(runId: string, node: string): Promise<{ text: string | null } | null>;
  /** The workflows that have runs, with capped running and failed counts. */
  listWorkflows(): Promise<UiWorkflow[]>;
  /** Workers, leases per owner, expired leases, retrying steps, the oldest due step per action. */
  health(): Promise<UiHealth>;
  /** The registered workers. */
  listWorkers(): Promise<UiWorker[]>;
  /** Closes the reader's pool. Idempotent. */
  close(): Promise<void>;
}

/**
 * Makes the UI's reader: its own pool (`max` connections, 3 by default) so that the UI never
 * takes the engine's connections, every read in `BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY`
 * with `statement_timeout` set for the transaction.
 * @throws ConfigError without `client` or `connectionString`, for a bad schema name, a pool size
 *   or timeout that is not a positive integer.
 */
export function createUiReader(options: UiReaderOptions): UiReader {
  const schema = options.schema ?? options.client?.schema ?? DEFAULT_SCHEMA;
  const q = quoteSchema(schema);
  const max = options.max ?? 3;
  const timeoutMs = options.statementTimeoutMs ?? 5_000;
  const cap = options.countCap ?? 10_000;
  for (const [name, v] of [
    ['max', max],
    ['statementTimeoutMs', timeoutMs],
    ['countCap', cap],
  ] as const) {
    if (!(Number.isSafeInteger(v) && v > 0)) {
      throw new ConfigError(`createUiReader: ${name} must be a positive integer, got ${v}`);
    }
  }
  const connection: pg.PoolConfig | undefined = options.connectionString
    ? { connectionString: options.connectionString }
    : options.client
      ? options.client.connectionString
        ? { connectionString: options.client.connectionString }
        : { ...(options.client.pool as unknown as { options: pg.PoolConfig }).options }
      : undefined;
  if (connection === undefined) {
    throw new ConfigError('createUiReader needs a client or a connectionString');
  }
  const pool = new pg.Pool({
    ...connection,
    max,
    connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
    keepAlive: true,
    application_name: 'cyclone-ui',
  });
  // An idle connection that dies emits 'error' on the pool; the next read opens another.
  pool.on('error', () => {});
  const db: SqlScope = { q, prepare: false, channel: channelOf(schema) };
  const begin = `BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SET LOCAL statement_timeout = ${timeoutMs}`;
  let closed = false;

  const read = <T>(fn: (c: Queryable) => Promise<T>): Promise<T> =>
    withConnection(pool, async (c) => {
      await c.query(begin);
      try {
        const result = await fn(c);
        await c.query('COMMIT');
        return result;
      } catch (err) {
        await c.query('ROLLBACK').catch(() => {});
        if ((err as { code?: unknown })?.code === '57014') {
          throw new QueryTimeoutError(timeoutMs, { cause: err });
        }
        throw err;
      }
    });

  return {
    ...uiReads(read, db, schema, cap),
    close: async () => {
      if (closed) return;
      closed = true;
      await pool.end();
    },
  };
}

/**
 * The reads of a `UiReader` over `read` (which runs a function in a read-only transaction), for
 * schema `db.q`, counts capped at `cap`. Separate from the pool so that a test can run the same
 * statements through EXPLAIN.
 */
export function uiReads(
  read: <T>(fn: (c: Queryable) => Promise<T>) => Promise<T>,
  db: SqlScope,
  schema: string,
  cap: number,
): Omit<UiReader, 'close'> {
  const capped = (n: number): CappedCount => ({ count: Math.min(n, cap), capped: n >= cap });
  return {
    q: db.q,
    schema,
    read,

    overview: () =>
      read(async (c) => {
        const r = await uiSql.overview(c, db, cap, WORKER_ALIVE_WITHIN_MS);
        const failed = await uiSql.recentFailedRuns(c, db, 10);
        return {
          at: iso(r.at),
          runs: {
            running: capped(r.runs_running),
            failed: capped(r.runs_failed),
            failedLast24h: capped(r.runs_failed_24h),
            estimatedTotal: Math.round(r.runs_estimate ?? 0),
          },
          steps: {
            ready: claimableCount(r.steps_ready, r.claimable_capped),
            retrying: claimableCount(r.steps_retrying, r.claimable_capped),
            scheduled: claimableCount(r.steps_scheduled, r.claimable_capped),
            running: capped(r.steps_running),
            queueLagMs: Math.max(0, r.queue_lag_ms),
            expiredLeases: capped(r.leases_expired),
          },
          recentFailed: failed.map(runRow),
          workers: { alive: r.workers_alive },
        };
      }),

    throughput: (o) => {
      const w = WINDOWS[o?.window];
      if (w === undefined) {
        throw new BadQueryError(`window must be 1h, 24h or 7d, got ${String(o?.window)}`);
      }
      const workflow = o.workflow ?? null;
      return read(async (c) => {
        const rows = await registrySql.throughput(c, db, { ...w, workflow });
        return {
          window: o.window,
          bucketMs: w.bucketSeconds * 1000,
          points: rows.map((r) => ({
            t: iso(r.t),
            completed: r.completed,
            failed: r.failed,
            discarded: r.discarded,
          })),
        };
      });
    },

    listRuns: async (f = {}) => {
      const limit = f.limit ?? 50;
      if (!(Number.isSafeInteger(limit) && limit >= 1 && limit <= 200)) {
        throw new BadQueryError(`limit must be an integer from 1 to 200, got ${String(limit)}`);
      }
      if (f.state !== undefined && !RUN_STATES.includes(f.state as RunStateFilter)) {
        throw new BadQueryError(`state must be one of ${RUN_STATES.join(', ')}`);
      }
      const dir = f.dir ?? 'older';
      if (dir !== 'older' && dir !== 'newer') {
        throw new BadQueryError(`dir must be older or newer, got ${String(dir)}`);
      }
      const cursor = f.cursor === undefined ? undefined : decodeCursor(f.cursor);
      const values: unknown[] = [];
      if (f.workflow !== undefined) values.push(f.workflow);
      if (f.from !== undefined) values.push(time('from', f.from));
      if (f.to !== undefined) values.push(time('to', f.to));
      if (cursor) values.push(cursor.at, cursor.id);
      values.push(limit + 1);
      const shape: uiSql.RunsPageShape = {
        workflow: f.workflow !== undefined,
        state: (f.state as RunStateFilter | undefined) ?? null,
        from: f.from !== undefined,
        to: f.to !== undefined,
        cursor: cursor ? dir : null,
      };
      const rows = await read((c) => uiSql.runsPage(c, db, shape, values));
      const more = rows.length > limit;
      const page = rows.slice(0, limit);
      if (shape.cursor === 'newer') page.reverse();
      const items = page.map(runRow);
      const first = page[0];
      const last = page[page.length - 1];
      // Older pages: another one exists when this one overflowed, or when we came from newer.
      const hasOlder = shape.cursor === 'newer' ? true : more;
      // Newer pages: none on the first page; after an older step, always; after newer, on overflow.
      const hasNewer = shape.cursor === null ? false : shape.cursor === 'older' ? true : more;
      return {
        items,
        next: hasOlder && last ? encodeCursor(last.created_key, last.id) : null,
        prev: hasNewer && first ? encodeCursor(first.created_key, first.id) : null,
      };
    },

    lookup: (text) => {
      const key = String(text ?? '').trim();
      if (key === '' || key.includes('\u0000')) return Promise.resolve([]);
      return read(async (c) => {
        const hits: UiLookupHit[] = [];
        if (UUID.test(key)) {
          const r = await uiSql.runById(c, db, key.toLowerCase());
          if (r) hits.push({ kind: 'run', runId: r.id, workflow: r.workflow });
        }
        const found = await uiSql.runsBySubmitKey(c, db, key, 20);
        // `workflow:key` names the workflow too: the submit key's unique index answers it.
        const colon = key.indexOf(':');
        if (colon > 0) {
          const r = await uiSql.runBySubmitKey(c, db, key.slice(0, colon), key.slice(colon + 1));
          if (r && !found.some((f: { id: string }) => f.id === r.id)) found.push(r);
        }
        for (const r of found) hits.push({ kind: 'submitKey', runId: r.id, workflow: r.workflow });
        return hits;
      });
    },

    getRun: (runId, o = {}) => {
      const maxSteps = positive('maxSteps', o.maxSteps ?? 2_000);
      if (!UUID.test(String(runId))) return Promise.resolve(null);
      return read(async (c) => {
        const r = await uiSql.runHeader(c, db, runId);
        if (!r) return null;
        const rows = await uiSql.runSteps(c, db, runId, maxSteps + 1);
        const steps = rows.slice(0, maxSteps).map(stepSummary);
        addUpstream(steps);
        return {
          run: {
            ...runRow(r),
            stepsActive: r.steps_active,
            stepsTotal: r.steps_total,
            updatedAt: iso(r.updated_at),
            inputBytes: r.input_bytes,
            debounceKey: r.debounce_key,
            traceparent: r.traceparent,
          },
          steps,
          truncated: rows.length > maxSteps,
        };
      });
    },

    runInput: (runId, o = {}) => {
      const previewChars = positive('previewChars', o.previewChars ?? 65_536);
      if (!UUID.test(String(runId))) return Promise.resolve(null);
      return read(async (c) => {
        const r = await uiSql.runInput(c, db, runId, previewChars);
        return r ? { text: r.text, bytes: r.bytes, truncated: r.truncated } : null;
      });
    },

    getStep: (runId, node, o = {}) => {
      const previewChars = positive('previewChars', o.previewChars ?? 65_536);
      const maxErrors = positive('maxErrors', o.maxErrors ?? 20);
      if (!UUID.test(String(runId)) || String(node).includes('\u0000')) {
        return Promise.resolve(null);
      }
      return read(async (c) => {
        const r = await uiSql.stepDetail(c, db, { runId, node, previewChars, maxErrors });
        if (!r) return null;
        const summary = stepSummary(r);
        summary.upstream = await uiSql.upstreamOf(c, db, runId, node);
        return {
          ...summary,
          errors: (JSON.parse(r.recent_errors) as Record<string, unknown>[]).map(stepError),
          output:
            r.output_text === null
              ? null
              : { text: r.output_text, bytes: r.output_text_bytes, truncated: r.output_truncated },
          signalled: r.signalled,
          waitDeadline: isoOrNull(r.wait_deadline),
          delayMs: Number(r.delay_ms),
        };
      });
    },

    stepOutput: (runId, node) => {
      if (!UUID.test(String(runId)) || String(node).includes('\u0000')) {
        return Promise.resolve(null);
      }
      return read(async (c) => {
        const r = await uiSql.stepOutput(c, db, runId, node);
        return r ? { text: r.text } : null;
      });
    },

    listWorkflows: () =>
      read(async (c) =>
        (await uiSql.workflows(c, db, cap)).map((r) => ({
          workflow: r.workflow,
          running: { count: r.running, capped: r.running_capped },
          failed: { count: r.failed, capped: r.failed_capped },
          lastCreatedAt: isoOrNull(r.last_created_at),
        })),
      ),

    health: () =>
      read(async (c) => {
        const r = await uiSql.health(c, db, cap);
        const owners = await uiSql.leaseOwners(c, db);
        const workers = await registrySql.listWorkers(c, db, WORKER_ALIVE_WITHIN_MS);
        return {
          at: iso(r.at),
          workers: workers.map(workerRow),
          leaseOwners: owners.map((o) => ({
            owner: o.owner,
            steps: o.steps,
            nextExpiry: isoOrNull(o.next_expiry),
            expired: o.expired,
          })),
          expiredLeases: capped(r.leases_expired),
          retrying: claimableCount(r.steps_retrying, r.claimable_capped),
          oldestDueByAction: (
            JSON.parse(r.due_by_action) as {
              workflow: string;
              action: string;
              oldest: string;
              due: number;
              lag_ms: number;
            }[]
          ).map((d) => ({
            workflow: d.workflow,
            action: d.action,
            oldestDueAt: iso(d.oldest),
            lagMs: Math.max(0, d.lag_ms),
            due: d.due,
          })),
        };
      }),

    listWorkers: () =>
      read(async (c) =>
        (await registrySql.listWorkers(c, db, WORKER_ALIVE_WITHIN_MS)).map(workerRow),
      ),
  };
}

/** A count of claimable steps: read among the first `cap` of each flow, so "at least" when one was full. */
function claimableCount(n: number, full: boolean): CappedCount {
  return { count: n, capped: full };
}

/** A Date, or a timestamp as PostgreSQL writes it in JSON, as an ISO-8601 UTC string. */
function iso(v: Date | string): IsoTime {
  return (v instanceof Date ? v : new Date(v)).toISOString();
}

function isoOrNull(v: Date | string | null | undefined): IsoTime | null {
  return v === null || v === undefined ? null : iso(v);
}

/** A positive integer option. @throws BadQueryError otherwise. */
function positive(name: string, v: number): number {
  if (!(Number.isSafeInteger(v) && v > 0)) {
    throw new BadQueryError(`${name} must be a positive integer, got ${String(v)}`);
  }
  return v;
}

/** A filter's time as a Date. @throws BadQueryError when it is not a date. */
function time(name: string, v: string): Date {
  const d = new Date(v);
  if (Number.isNaN(d.getTime())) throw new BadQueryError(`${name} is not a time: ${String(v)}`);
  return d;
}

/**
 * A cursor: base64url of `<created_at as PostgreSQL's JSON text, microseconds kept>|<run id>`.
 * The creation time keeps its microseconds (a Date would drop them and skip or repeat runs
 * created within one millisecond).
 */
function encodeCursor(createdKey: string, id: string): string {
  return Buffer.from(`${createdKey}|${id}`, 'utf8').toString('base64url');
}

/** @throws BadQueryError for a cursor this reader did not make. */
function decodeCursor(cursor: string): { at: string; id: string } {
  const text = Buffer.from(String(cursor), 'base64url').toString('utf8');
  const bar = text.lastIndexOf('|');
  const at = text.slice(0, bar);
  const id = text.slice(bar + 1);
  if (bar < 0 || !UUID.test(id) || Number.isNaN(new Date(at).getTime())) {
    throw new BadQueryError('bad cursor');
  }
  return { at, id };
}

// biome-ignore lint/suspicious/noExplicitAny: rows from pg are untyped
type Row = any;

function runRow(r: Row): UiRunRow {
  return {
    runId: r.id,
    workflow: r.workflow,
    state: r.state,
    submitKey: r.submit_key,
    stepsRemaining: r.steps_remaining,
    createdAt: iso(r.created_at),
    completedAt: isoOrNull(r.completed_at),
  };
}

function stepSummary(r: Row): UiStepSummary {
  const started = r.started_at as Date | null;
  const completed = r.completed_at as Date | null;
  return {
    node: r.node,
    action: r.action,
    state: r.state,
    attempt: r.attempt,
    maxAttempts: r.max_attempts,
    depsRemaining: r.deps_remaining,
    upstream: [],
    downstream: r.downstream,
    ancestors: r.ancestors,
    scheduledAt: iso(r.scheduled_at),
    leaseOwner: r.lease_owner,
    leaseExpiresAt: isoOrNull(r.lease_expires_at),
    startedAt: isoOrNull(started),
    completedAt: isoOrNull(completed),
    durationMs: started && completed ? Math.max(0, completed.getTime() - started.getTime()) : null,
    errorCount: r.error_count,
    lastError: r.last_error,
    lastErrorKind: r.last_error_kind,
    outputBytes: r.output_bytes,
    snoozes: r.snoozes,
    waitFor: r.wait_for,
    reopenedAfterAttempt: r.reopened_after_attempt,
  };
}

/** Each step's direct upstream nodes, from the others' `downstream`. */
function addUpstream(steps: UiStepSummary[]): void {
  const byNode = new Map(steps.map((s) => [s.node, s]));
  for (const s of steps) {
    for (const d of s.downstream) byNode.get(d)?.upstream.push(s.node);
  }
}

function stepError(e: Record<string, unknown>): UiStepError {
  const str = (v: unknown) => (typeof v === 'string' ? v : null);
  return {
    attempt: typeof e.attempt === 'number' ? e.attempt : null,
    at: str(e.at),
    kind: str(e.kind),
    message: str(e.message) ?? JSON.stringify(e),
    stack: str(e.stack),
  };
}

function workerRow(r: registrySql.WorkerRow): UiWorker {
  return {
    workerId: r.worker_id,
    host: r.host,
    pid: r.pid,
    startedAt: iso(r.started_at),
    lastSeenAt: iso(r.last_seen_at),
    concurrency: r.concurrency,
    inFlight: r.in_flight,
    workflows: r.workflows,
    version: r.version,
    alive: r.alive,
  };
}
