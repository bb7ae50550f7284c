/**
 * The JSON API of `@cyclone/ui`, as types and constants shared by the server and the pages (the
 * SPA imports this module, so it has no runtime dependency). Every path is under
 * `<basePath>/api/`; timestamps are ISO-8601 strings in UTC; payloads travel as raw JSON text
 * (`Payload`), so numbers beyond 2^53 reach the page exactly. docs/ui.md has the table.
 */
import type { RunState, StepState } from '@cyclone/core';

/** The header every mutation must carry (with `Content-Type: application/json`). */
export const UI_HEADER = 'X-Cyclone-UI';
/** The value of `UI_HEADER`. */
export const UI_HEADER_VALUE = '1';
/** Largest page of `GET /api/runs`. */
export const PAGE_MAX = 200;
/** Default page of `GET /api/runs`. */
export const PAGE_DEFAULT = 50;
/** Most run ids one `POST /api/runs/bulk` with `ids` takes. */
export const BULK_IDS_MAX = 500;
/** Most error entries `GET /api/runs/:id/steps/:node` returns, newest first. */
export const STEP_ERRORS_MAX = 20;
/** What a retry's response says about provider calls (its `notice`), and its confirmation. */
export const RETRY_NOTICE =
  'Provider calls recorded as succeeded will not be repeated: a retried node keeps its idempotency keys, so the ledger replays them.';

/** The `notice` of a cancel: what it did to the run. */
export function cancelNotice(runId: string): string {
  return `Run ${runId} cancelled: its unfinished nodes are cancelled, and running handlers are told to stop.`;
}

/** The `notice` of a bulk cancel. */
export const BULK_CANCEL_NOTICE =
  "Each run's unfinished nodes are cancelled, and running handlers are told to stop.";

/**
 * The `notice` of a signal: sent (and which wait nodes complete with it, or that none waits for
 * it and it is stored anyway), or not accepted because the run already had one of that name.
 */
export function signalNotice(
  runId: string,
  name: string,
  result: { accepted: boolean; waitingNodes: readonly string[] },
): string {
  if (!result.accepted) {
    return `Signal “${name}” not accepted: run ${runId} already had one of that name.`;
  }
  const nodes = result.waitingNodes;
  if (nodes.length === 0) {
    return `Signal “${name}” sent to run ${runId}. No node of this run waits for “${name}” (a misspelt name, or its wait node has finished); it is stored anyway.`;
  }
  return `Signal “${name}” sent to run ${runId}: ${nodes.length === 1 ? 'node' : 'nodes'} ${nodes.join(', ')} ${nodes.length === 1 ? 'completes' : 'complete'} with its payload.`;
}

/** The `notice` of a schedule action. */
export function scheduleNotice(name: string, action: 'pause' | 'resume' | 'trigger'): string {
  const did = { pause: 'paused', resume: 'resumed', trigger: 'triggered' }[action];
  return `Schedule “${name}” ${did}.`;
}

/**
 * The states of a run and of a step: core's own types, imported for types only (erased from the
 * SPA's bundle, so this module keeps no runtime dependency).
 */
export type { RunState, StepState };

/** Every run state, for filters. */
export const RUN_STATES: readonly RunState[] = ['running', 'completed', 'failed', 'cancelled'];

/** What the current user may do; all false in read-only mode. */
export interface Permissions {
  /** Retry a node, retry all, bulk retry. */
  retry: boolean;
  /** Cancel a run, bulk cancel. */
  cancel: boolean;
  /** Send a signal to a run. */
  signal: boolean;
  /** Pause, resume and trigger schedules. */
  schedules: boolean;
}

/**
 * The page's configuration, rendered into index.html at request time as
 * `<script type="application/json" id="cyclone-config">` (after a `<base href="{basePath}/">`).
 */
export interface UiConfig {
  /** The public path the UI is mounted at, without a trailing slash; `''` at the root. */
  basePath: string;
  /** `basePath + '/api'`. */
  apiBase: string;
  readOnly: boolean;
  /** Version of `@cyclone/ui`. */
  version: string;
  /** Who the authorize hook said the user is; null without a hook. */
  user: string | null;
  can: Permissions;
  /** Suggested polling interval, ms. */
  refreshMs: number;
  /** Show payloads collapsed until asked for. */
  hidePayloadsByDefault: boolean;
}

/** `GET /api/meta`. */
export interface MetaResponse extends UiConfig {
  /** Which optional parts the connected core (and database) has. */
  features: {
    schedules: boolean;
    signals: boolean;
    limits: boolean;
    workers: boolean;
    throughput: boolean;
    ledger: boolean;
  };
  limits: { maxBulk: number; previewBytes: number; pageMax: number; bulkIdsMax: number };
}

/** The body of every error answer of `/api/*`. */
export interface ApiError {
  error: ApiErrorCode;
  message: string;
  details?: unknown;
}

/** The `error` codes and their HTTP statuses (docs/ui.md § JSON API). */
export type ApiErrorCode =
  | 'bad_request' // 400
  | 'invalid_signal' // 400
  | 'unauthorized' // 401
  | 'forbidden' // 403: refused by the authorize hook, or the user lacks the right
  | 'read_only' // 403
  | 'csrf' // 403: cross-origin, or without the custom header
  | 'host_not_allowed' // 403: the Host header is not one of allowedHosts (DNS rebinding)
  | 'not_found' // 404
  | 'run_not_found' // 404
  | 'node_not_found' // 404
  | 'schedule_not_found' // 404
  | 'not_supported' // 404: the connected core lacks the feature
  | 'invalid_state' // 409
  | 'conflict' // 409: a transaction conflict; try again
  | 'unsupported_media_type' // 415
  | 'query_timeout' // 503
  | 'unavailable' // 503: the database cannot be reached
  | 'internal'; // 500

/**
 * A JSON value as raw text. `truncated`: `text` is only the first `previewBytes` bytes (not valid
 * JSON; offer the download). `hidden`: the redact hook removed the value. A ledger body the ledger
 * itself kept cut has `truncated` set and `bytes` the size of the part kept.
 */
export interface Payload {
  /** Size of the whole value as JSON text, in bytes. */
  bytes: number;
  truncated: boolean;
  text: string;
  hidden?: boolean;
}

/** A count read with a cap: `capped` means "at least `count`". */
export interface Count {
  count: number;
  capped: boolean;
}

/** A run in a list. */
export interface RunRow {
  runId: string;
  workflow: string;
  state: RunState;
  submitKey: string | null;
  stepsRemaining: number;
  createdAt: string;
  completedAt: string | null;
}

/** A run with its input, `GET /api/runs/:id`. */
export interface RunDetail extends RunRow {
  updatedAt: string;
  /** Steps not yet finished. */
  stepsActive: number;
  /** All the run's steps (nodes), also when `steps` carries only the first 2,000. */
  stepsTotal: number;
  input: Payload | null;
  debounceKey: string | null;
  traceparent: string | null;
}

/** Ledger phases of a node's provider calls, counted. */
export interface LedgerCounts {
  started: number;
  succeeded: number;
  failed: number;
  unknown: number;
}

/** A step without its bodies, as the run page lists it. */
export interface StepSummary {
  node: string;
  action: string;
  state: StepState;
  attempt: number;
  maxAttempts: number;
  depsRemaining: number;
  /** Direct upstream nodes. */
  upstream: string[];
  /** Direct downstream nodes. */
  downstream: string[];
  /** Every node upstream, direct or not. */
  ancestors: string[];
  scheduledAt: string;
  leaseOwner: string | null;
  leaseExpiresAt: string | null;
  startedAt: string | null;
  completedAt: string | null;
  durationMs: number | null;
  snoozes: number;
  errorCount: number;
  /** The newest error's message, cut to 300 characters. */
  lastError: string | null;
  lastErrorKind: string | null;
  /** Size of the stored output as JSON text, bytes; null without an output. */
  outputBytes: number | null;
  /** A wait node's signal name; null for an action node. */
  waitFor: string | null;
  /** The attempt the step had reached when an operator last reopened it; null if never. */
  reopenedAfterAttempt: number | null;
  /** The node's provider calls in the ledger, by phase (all 0 without @cyclone/idempotency). */
  ledger: LedgerCounts;
}

/** One failed attempt of a step (fields null when the stored entry lacks them). */
export interface StepErrorEntry {
  attempt: number | null;
  at: string | null;
  kind: string | null;
  message: string;
  /** Cut to 8 KB. */
  stack: string | null;
}

/** `GET /api/runs/:id/steps/:node`. */
export interface StepDetail extends StepSummary {
  /** Newest first, at most `STEP_ERRORS_MAX`. */
  errors: StepErrorEntry[];
  output: Payload | null;
  /** A wait node: its signal has arrived. */
  signalled: boolean;
  waitDeadline: string | null;
  delayMs: number;
}

/** `GET /api/runs/:id/steps/:node`. */
export interface StepResponse {
  step: StepDetail;
}

/** `GET /api/runs/:id`. */
export interface RunResponse {
  run: RunDetail;
  steps: StepSummary[];
  /** True when the run has more nodes than one answer carries (2,000). */
  truncated: boolean;
}

/** `GET /api/runs/:id/input`. */
export interface InputResponse {
  input: Payload | null;
}

/** A row of the idempotency ledger (@cyclone/idempotency): one provider call's key. */
export interface LedgerEntry {
  runId: string;
  key: string;
  node: string;
  scope: string | null;
  provider: string | null;
  operation: string | null;
  phase: 'started' | 'succeeded' | 'failed' | 'unknown';
  generation: number;
  ownerAttempt: number;
  calls: number;
  callStartedAt: string | null;
  providerRef: string | null;
  result: Payload | null;
  error: Payload | null;
  createdAt: string;
  updatedAt: string;
}

/** `GET /api/runs/:id/ledger`. */
export interface LedgerResponse {
  items: LedgerEntry[];
}

/** `GET /api/unknown`: oldest first; `next` pages on. */
export interface UnknownResponse {
  items: LedgerEntry[];
  next: string | null;
}

/** `GET /api/overview`. */
export interface Overview {
  at: string;
  runs: { running: Count; failed: Count; failedLast24h: Count; estimatedTotal: number };
  steps: {
    ready: Count;
    retrying: Count;
    scheduled: Count;
    running: Count;
    /** Age of the oldest due step, ms (0 when none is due). */
    queueLagMs: number;
    expiredLeases: Count;
  };
  /** The newest failed runs, at most 10. */
  recentFailed: RunRow[];
  workers: { alive: number };
  /** Ledger entries whose outcome is unknown; null without @cyclone/idempotency. */
  unknownOutcomes: Count | null;
}

/** One bucket of `GET /api/stats/throughput`. */
export interface ThroughputPoint {
  /** The bucket's start. */
  t: string;
  /** Steps completed (or skipped). */
  completed: number;
  /** Attempts failed (retryable or discarded). */
  failed: number;
  /** Of the failed attempts, those that discarded their step. */
  discarded: number;
}

/** `GET /api/stats/throughput`: dense, oldest first. */
export interface ThroughputResponse {
  window: '1h' | '24h' | '7d';
  /** 60,000 (1h), 300,000 (24h) or 3,600,000 (7d). */
  bucketMs: number;
  points: ThroughputPoint[];
}

/** The filters of `GET /api/runs` and of a bulk action. */
export interface RunsFilter {
  state?: RunState;
  workflow?: string;
  /** Created at or after (ISO). */
  from?: string;
  /** Created before (ISO). */
  to?: string;
}

/** `GET /api/runs`: newest first; `next` pages older (`dir=older`), `prev` newer (`dir=newer`). */
export interface RunsResponse {
  items: RunRow[];
  next: string | null;
  prev: string | null;
}

/** What a go-to query found. */
export type LookupHit =
  | { kind: 'run'; runId: string; workflow: string }
  | { kind: 'submitKey'; runId: string; workflow: string }
  | { kind: 'idempotencyKey'; runId: string; node: string };

/** `GET /api/lookup?q=`: every hit (a submit key may be in several workflows); 404 when none. */
export interface LookupResponse {
  items: LookupHit[];
}

/** `GET /api/workflows`. */
export interface WorkflowsResponse {
  items: { workflow: string; running: Count; failed: Count; lastCreatedAt: string | null }[];
}

/** A worker process as it registered itself. */
export interface WorkerRow {
  workerId: string;
  host: string;
  pid: number;
  startedAt: string;
  lastSeenAt: string;
  concurrency: number;
  inFlight: number;
  workflows: string[];
  version: string | null;
  /** Seen recently enough to count as alive. */
  alive: boolean;
}

/** `GET /api/health/workers`. */
export interface HealthResponse {
  at: string;
  workers: WorkerRow[];
  /** Steps held per lease owner. */
  leaseOwners: { owner: string; steps: number; nextExpiry: string | null; expired: number }[];
  expiredLeases: Count;
  retrying: Count;
  oldestDueByAction: {
    action: string;
    workflow: string;
    oldestDueAt: string;
    lagMs: number;
    due: number;
  }[];
}

/** A cron schedule (core's `ScheduleInfo`, dates as ISO strings). */
export interface ScheduleRow {
  name: string;
  [field: string]: unknown;
}

/** `GET /api/schedules`. */
export interface SchedulesResponse {
  items: ScheduleRow[];
}

/** `POST /api/runs/:id/retry`: `{ node }` or `{ all: true }`. */
export type RetryRequest = { node: string } | { all: true };
/** Answer of `POST /api/runs/:id/retry`. */
export interface RetryResponse {
  runId: string;
  reopened: string[];
  notice: string;
}
/** Answer of `POST /api/runs/:id/cancel`. */
export interface CancelResponse {
  runId: string;
  cancelled: true;
  notice: string;
}
/** `POST /api/runs/:id/signal`. */
export interface SignalRequest {
  name: string;
  payload?: unknown;
}
/** Answer of `POST /api/runs/:id/signal`. */
export interface SignalResponse {
  runId: string;
  name: string;
  accepted: boolean;
  /** The run's wait nodes of that name not yet finished; empty: none waits for it (stored anyway). */
  waitingNodes: string[];
  notice: string;
}

/** The bulk actions. */
export type BulkAction = 'retryAll' | 'cancel';
/** `POST /api/runs/bulk`: `ids`, or `filter` walked from `cursor`. */
export interface BulkRequest {
  action: BulkAction;
  ids?: string[];
  filter?: RunsFilter;
  cursor?: string;
  /** How many runs the user confirmed; refused when the filter matches far more. */
  expect?: number;
}
/** Answer of `POST /api/runs/bulk`; POST again with `cursor: next` while `next` is not null. */
export interface BulkResponse {
  action: BulkAction;
  processed: number;
  changed: number;
  skipped: number;
  failed: { runId: string; error: string; message: string }[];
  next: string | null;
  notice: string;
}

/** Answer of the schedule actions. */
export interface ScheduleActionResponse {
  name: string;
  action: 'pause' | 'resume' | 'trigger';
  notice: string;
  [field: string]: unknown;
}
