/**
 * Submission (`Client.submit`, `submitOnce`, `submitMany`): validate the run input and options,
 * encode the input as stored JSON, chunk, insert the runs with their steps; a submit key's
 * conflict loop; run ids. A debounced submit goes to `debounce.ts` once validated.
 */
import { randomFillSync } from 'node:crypto';
import { v7 as uuidv7 } from 'uuid';
import type { ZodType } from 'zod';
import { type Db, isTransactionConflict, withTransaction } from './db.js';
import { submitDebounced } from './debounce.js';
import {
  InputValidationError,
  MAX_DELAY_MS,
  PayloadError,
  SubmitKeyConflictError,
  TransactionConflictError,
  zodIssues,
} from './errors.js';
import { encodePayload, hashJson, isStorableText } from './json.js';
import type { ActionLimits } from './limits.js';
import type { DebounceWindow } from './sql/debounce.js';
import {
  findRunByKey,
  insertRun,
  insertRuns,
  type RunStart,
  type StepColumns,
} from './sql/submit.js';
import { ATTR, submitTracer, tracedSubmit } from './telemetry.js';
import {
  type DebouncedSubmitResult,
  type Json,
  MAX_PRIORITY,
  MIN_PRIORITY,
  type SubmitManyResult,
  type SubmitOnceResult,
  type SubmitOptions,
  type SubmitResult,
  type Tx,
} from './types.js';

/**
 * What submitting reads of a workflow: its name, input schema and compiled DAG. A `Workflow` made
 * by `newWorkflow` is one. The client side takes this shape rather than `Workflow` so that it
 * never imports the definitions, whose handler context refers back to the `Client`.
 */
export interface SubmittableWorkflow<RI> {
  readonly kind: 'workflow';
  readonly name: string;
  readonly inputSchema: ZodType<RI> | undefined;
  /** Nodes in a topological order. */
  readonly nodes: readonly SubmittableNode<RI>[];
}

/** What submitting reads of one node; a `NodeDef` is one (its fields are documented there). */
export interface SubmittableNode<RI> {
  readonly name: string;
  readonly action: {
    readonly name: string;
    readonly inputSchema: ZodType | undefined;
    /** Its limits (`ActionLimits`): whether its steps go through the limited claim. */
    readonly limits?: ActionLimits | undefined;
  };
  readonly after: readonly string[];
  readonly ancestors: readonly string[];
  readonly downstream: readonly string[];
  readonly input: ((run: RI, upstream: Record<string, Json>) => unknown) | undefined;
  readonly maxAttempts: number;
  /** The node's timer, ms; absent or 0: none. */
  readonly delayMs?: number;
  /** A wait node's signal name. */
  readonly waitFor?: string | undefined;
  /** A wait node's timeout, ms. */
  readonly waitTimeoutMs?: number | undefined;
}

/** What the submit path needs of the client: its database handle and payload limit. */
export interface SubmitScope {
  readonly db: Db;
  readonly maxPayloadBytes: number;
}

/**
 * How the claim treats the steps of `action` (the `flow` column): 0 no limit, 1 a keyed limit
 * whose keys are resolved once the step is due, 2 limited (no key to resolve).
 */
export function flowOf(action: { readonly limits?: ActionLimits | undefined }): 0 | 1 | 2 {
  const l = action.limits;
  if (!l) return 0;
  return l.keyedConcurrency || l.keyedRate ? 1 : 2;
}

/** The earliest `runAt` taken: 0001-01-01T00:00:00Z, in ms. */
const EARLIEST_RUN_AT_MS = Date.parse('0001-01-01T00:00:00Z');

/** The longest submit key, in UTF-8 bytes. */
const MAX_KEY_BYTES = 4096;

/**
 * `submitMany` sends at most this many runs per statement (as the peers' bulk calls take 1,000
 * jobs; `bench/README.md` row 1 compares them), and at most `SUBMIT_MANY_CHUNK_BYTES` of input
 * JSON (a chunk holds at least one run), so a statement stays far below PostgreSQL's 1 GB limit
 * on a message even with inputs near `maxPayloadBytes`.
 */
const SUBMIT_MANY_CHUNK_RUNS = 1000;
const SUBMIT_MANY_CHUNK_BYTES = 16 * 1024 * 1024;

/** Random bytes for run ids, filled 256 ids at a time (`newRunId`). */
const RANDOM_POOL = new Uint8Array(16 * 256);
let randomUsed = RANDOM_POOL.length;
/** The pool's bytes 6-9 of an id start its counter, as in uuid's v7. */
const POOL_VIEW = new DataView(RANDOM_POOL.buffer);

/**
 * A new run id: a UUIDv7 (RFC 9562: 48-bit Unix ms timestamp, then random bits), so runs
 * created together sit together in the primary-key indexes of runs, steps and the ledger. With
 * random (v4) ids, every completion would touch a random leaf of indexes that outgrow the buffer
 * cache as history accumulates (`bench/README.md` row 7 measures throughput with such a history).
 * Its random bits come from a pool filled by `randomFillSync`, each byte used once: one call
 * into the random source per 256 ids instead of one per id, which cost a single submit about
 * 40 µs when the process had been idle (`bench/README.md` row 5).
 */
function newRunId(): string {
  if (randomUsed === RANDOM_POOL.length) {
    randomFillSync(RANDOM_POOL);
    randomUsed = 0;
  }
  const random = RANDOM_POOL.subarray(randomUsed, randomUsed + 16);
  randomUsed += 16;
  // uuid keeps its ids in order within a millisecond only without options: kept here as it does.
  const now = Date.now();
  if (now > idMsecs) {
    idMsecs = now;
    idSeq = POOL_VIEW.getUint32(randomUsed - 10) & 0x7fffffff;
  } else {
    idSeq = (idSeq + 1) | 0;
    if (idSeq === 0) idMsecs++;
  }
  return uuidv7({ random, msecs: idMsecs, seq: idSeq });
}

/** The last run id's millisecond and 31-bit counter (`newRunId`: ids in creation order). */
let idMsecs = Number.NEGATIVE_INFINITY;
let idSeq = 0;

/** Each frozen workflow's step columns, made on its first submit. */
const columnsOf = new WeakMap<object, StepColumns>();

/**
 * The per-node columns of `workflow`'s steps (`sql/submit.ts`), in the workflow's node order;
 * made once for a frozen workflow (`newWorkflow` freezes it and its nodes), every time for any
 * other object of that shape, which could change between submits.
 */
function stepColumns<RI>(workflow: SubmittableWorkflow<RI>): StepColumns {
  if (!Object.isFrozen(workflow)) return makeStepColumns(workflow);
  let columns = columnsOf.get(workflow);
  if (columns === undefined) {
    columns = makeStepColumns(workflow);
    columnsOf.set(workflow, columns);
  }
  return columns;
}

function makeStepColumns<RI>(workflow: SubmittableWorkflow<RI>): StepColumns {
  const nodes = workflow.nodes;
  return {
    stepCount: nodes.length,
    rootCount: nodes.filter((n) => n.after.length === 0).length,
    nodes: nodes.map((n) => n.name),
    actions: nodes.map((n) => n.action.name),
    maxAttempts: nodes.map((n) => n.maxAttempts),
    deps: nodes.map((n) => n.after.length),
    downstream: nodes.map((n) => JSON.stringify(n.downstream)),
    ancestors: nodes.map((n) => JSON.stringify(n.ancestors)),
    delays: nodes.map((n) => n.delayMs ?? 0),
    waitFor: nodes.map((n) => n.waitFor ?? null),
    waitTimeouts: nodes.map((n) => n.waitTimeoutMs ?? null),
    flows: nodes.map((n) => flowOf(n.action)),
  };
}

/**
 * A bad option's value as an error message shows it: a string quoted and said to be one
 * (`'3' (a string)`, at most 40 characters of it), since a bare `got 3` reads as the number;
 * anything else as `String` prints it.
 */
function shownValue(v: unknown): string {
  if (typeof v !== 'string') return String(v);
  return `'${v.length > 40 ? `${v.slice(0, 40)}…` : v}' (a string)`;
}

/**
 * The run's priority from `options` (default 0).
 * @throws InputValidationError unless it is an integer from `MIN_PRIORITY` to `MAX_PRIORITY`;
 *   nothing is written.
 */
function priorityOf(workflow: string, options: SubmitOptions): number {
  const p = options.priority;
  if (p === undefined) return 0;
  if (!(typeof p === 'number' && Number.isInteger(p) && p >= MIN_PRIORITY && p <= MAX_PRIORITY)) {
    throw new InputValidationError(workflow, [
      {
        path: ['priority'],
        message: `priority must be an integer from ${MIN_PRIORITY} to ${MAX_PRIORITY}, got ${shownValue(p)}`,
      },
    ]);
  }
  return p;
}

/**
 * When the run starts, from `runAt` or `delayMs` (neither: now).
 * @throws InputValidationError for an invalid `Date`, a delay that is not a number of ms from 0
 *   to `MAX_DELAY_MS`, a `runAt` more than `MAX_DELAY_MS` ahead (by this process's clock), or
 *   both options at once; nothing is written.
 */
function runStart(workflow: string, options: SubmitOptions): RunStart {
  const bad = (path: string, message: string) =>
    new InputValidationError(workflow, [{ path: [path], message }]);
  const { runAt, delayMs } = options;
  if (runAt !== undefined && delayMs !== undefined) {
    throw bad('runAt', 'give runAt or delayMs, not both');
  }
  if (runAt !== undefined) {
    if (!(runAt instanceof Date) || !Number.isFinite(runAt.getTime())) {
      throw bad('runAt', `runAt must be a valid Date, got ${String(runAt)}`);
    }
    if (runAt.getTime() - Date.now() > MAX_DELAY_MS) {
      throw bad('runAt', `runAt is more than ${MAX_DELAY_MS} ms (10 years) ahead`);
    }
    // PostgreSQL's timestamps start in 4713 BC; any past time starts the run at once anyway.
    if (runAt.getTime() < EARLIEST_RUN_AT_MS) {
      throw bad('runAt', `runAt must be in the year 1 or later, got ${runAt.toISOString()}`);
    }
    return { runAt, delayMs: 0 };
  }
  if (delayMs !== undefined) {
    checkDelay(workflow, ['delayMs'], delayMs);
    return { runAt: null, delayMs };
  }
  return { runAt: null, delayMs: 0 };
}

/**
 * @throws InputValidationError at `path` unless `ms` is a number of ms from 0 to `MAX_DELAY_MS`.
 */
function checkDelay(workflow: string, path: string[], ms: unknown): void {
  if (typeof ms !== 'number' || !Number.isFinite(ms) || ms < 0 || ms > MAX_DELAY_MS) {
    throw new InputValidationError(workflow, [
      {
        path,
        message: `${path.join('.')} must be a number of ms from 0 to ${MAX_DELAY_MS} (10 years), got ${shownValue(ms)}`,
      },
    ]);
  }
}

/**
 * @throws InputValidationError at `path` unless `key` is a usable key: a non-empty string
 *   without NUL characters or lone surrogates, at most `MAX_KEY_BYTES`.
 */
function checkKey(workflow: string, path: string[], key: unknown): asserts key is string {
  if (
    typeof key !== 'string' ||
    key.length === 0 ||
    // A lone surrogate would be stored as U+FFFD, so two different keys could collide.
    !isStorableText(key) ||
    Buffer.byteLength(key) > MAX_KEY_BYTES
  ) {
    const what = path[0] === 'key' ? 'submit key' : path.join('.');
    throw new InputValidationError(workflow, [
      {
        path,
        message: `${what} must be a non-empty string without NUL characters or lone surrogates, at most ${MAX_KEY_BYTES} bytes`,
      },
    ]);
  }
}

/**
 * The debounce window of `options`, or undefined without `debounce`.
 * @throws InputValidationError for a debounce that is not an object, a bad key (as a submit
 *   key), a delay not a number of ms from 0 to `MAX_DELAY_MS`, `maxDelayMs` below `delayMs`,
 *   `runAt`/`delayMs` given too (the window sets the start), or a workflow with a root wait
 *   node; nothing is written.
 */
function debounceWindow<RI>(
  workflow: SubmittableWorkflow<RI>,
  options: SubmitOptions,
): { key: string; window: DebounceWindow } | undefined {
  const { debounce } = options;
  if (debounce === undefined) return undefined;
  const bad = (path: string[], message: string) =>
    new InputValidationError(workflow.name, [{ path, message }]);
  if (debounce === null || typeof debounce !== 'object' || Array.isArray(debounce)) {
    throw bad(['debounce'], 'debounce must be an object { key, delayMs, maxDelayMs? }');
  }
  if (options.runAt !== undefined || options.delayMs !== undefined) {
    throw bad(['debounce'], 'debounce sets when the run starts: not with runAt or delayMs');
  }
  // A wait node's time is its signal's, which a debounce must not move.
  const waiting = workflow.nodes.find((n) => n.after.length === 0 && n.waitFor !== undefined);
  if (waiting) {
    throw bad(
      ['debounce'],
      `debounce delays the run's root nodes, and root node '${waiting.name}' is a wait node`,
    );
  }
  const { key, delayMs, maxDelayMs } = debounce;
  checkKey(workflow.name, ['debounce', 'key'], key);
  checkDelay(workflow.name, ['debounce', 'delayMs'], delayMs);
  if (maxDelayMs === undefined) return { key, window: { delayMs, maxDelayMs: null } };
  checkDelay(workflow.name, ['debounce', 'maxDelayMs'], maxDelayMs);
  if (maxDelayMs < delayMs) {
    throw bad(
      ['debounce', 'maxDelayMs'],
      `debounce.maxDelayMs (${maxDelayMs}) must be at least debounce.delayMs (${delayMs})`,
    );
  }
  return { key, window: { delayMs, maxDelayMs } };
}

/** @throws InputValidationError when `options` has a debounce, which only `submit` takes. */
function refuseDebounce(workflow: string, form: string, options: SubmitOptions): void {
  if (options.debounce !== undefined) {
    throw new InputValidationError(workflow, [
      { path: ['debounce'], message: `debounce is for submit only, not ${form}` },
    ]);
  }
}

/**
 * `Client.submit`: one run, its steps and a NOTIFY in one statement; with `debounce`, the
 * transaction of `debounce.ts`, which answers `debounced` too. In a `cyclone.submit` span when
 * an SDK registered a tracer provider, as every submit form.
 */
export async function submit<RI>(
  scope: SubmitScope,
  workflow: SubmittableWorkflow<RI>,
  input: RI,
  options: SubmitOptions,
): Promise<SubmitResult | DebouncedSubmitResult> {
  const tracer = submitTracer(scope.db);
  if (!tracer) return submitRun(scope, workflow, input, options, null);
  return tracedSubmit(
    tracer,
    'submit',
    workflow.name,
    (traceparent) => submitRun(scope, workflow, input, options, traceparent),
    (r) =>
      'debounced' in r
        ? { [ATTR.runId]: r.runId, [ATTR.submitDebounced]: r.debounced }
        : { [ATTR.runId]: r.runId },
  );
}

/** `submit` with the trace context to store with the run (`traceparent`, or null). */
async function submitRun<RI>(
  scope: SubmitScope,
  workflow: SubmittableWorkflow<RI>,
  input: RI,
  options: SubmitOptions,
  traceparent: string | null,
): Promise<SubmitResult | DebouncedSubmitResult> {
  const priority = priorityOf(workflow.name, options);
  const debounce = debounceWindow(workflow, options);
  if (debounce) {
    const { text, hash } = encodeRunInput(scope, workflow, input);
    return submitDebounced(
      scope.db,
      {
        workflow: workflow.name,
        runId: newRunId(),
        key: debounce.key,
        input: text,
        inputHash: hash,
        steps: stepColumns(workflow),
        window: debounce.window,
        traceparent,
        priority,
      },
      options.tx,
    );
  }
  const start = runStart(workflow.name, options);
  const { runId } = await insert(scope, workflow, input, null, options, start, traceparent);
  return { runId };
}

/**
 * `Client.submitOnce`: checks the key, then inserts or finds the key's run (which keeps the trace
 * context of the submit that created it).
 */
export async function submitOnce<RI>(
  scope: SubmitScope,
  workflow: SubmittableWorkflow<RI>,
  key: string,
  input: RI,
  options: SubmitOptions,
): Promise<SubmitOnceResult> {
  const tracer = submitTracer(scope.db);
  if (!tracer) return submitOnceRun(scope, workflow, key, input, options, null);
  return tracedSubmit(
    tracer,
    'submitOnce',
    workflow.name,
    (traceparent) => submitOnceRun(scope, workflow, key, input, options, traceparent),
    (r) => ({ [ATTR.runId]: r.runId, [ATTR.submitCreated]: r.created }),
  );
}

async function submitOnceRun<RI>(
  scope: SubmitScope,
  workflow: SubmittableWorkflow<RI>,
  key: string,
  input: RI,
  options: SubmitOptions,
  traceparent: string | null,
): Promise<SubmitOnceResult> {
  checkKey(workflow.name, ['key'], key);
  refuseDebounce(workflow.name, 'submitOnce', options);
  priorityOf(workflow.name, options);
  const start = runStart(workflow.name, options);
  return insert(scope, workflow, input, key, options, start, traceparent);
}

/**
 * `Client.submitMany`: every input validated and encoded first, then one statement per chunk;
 * several chunks share one transaction (the caller's `tx`, or one on a pool connection).
 */
export async function submitMany<RI>(
  scope: SubmitScope,
  workflow: SubmittableWorkflow<RI>,
  inputs: readonly RI[],
  options: SubmitOptions,
): Promise<SubmitManyResult> {
  const tracer = submitTracer(scope.db);
  if (!tracer) return submitManyRuns(scope, workflow, inputs, options, null);
  return tracedSubmit(
    tracer,
    'submitMany',
    workflow.name,
    (traceparent) => submitManyRuns(scope, workflow, inputs, options, traceparent),
    (r) => ({ [ATTR.submitRuns]: r.runIds.length }),
  );
}

/** `submitMany` with the trace context every run stores (`traceparent`, or null). */
async function submitManyRuns<RI>(
  scope: SubmitScope,
  workflow: SubmittableWorkflow<RI>,
  inputs: readonly RI[],
  options: SubmitOptions,
  traceparent: string | null,
): Promise<SubmitManyResult> {
  if (!Array.isArray(inputs)) {
    throw new InputValidationError(workflow.name, [
      { path: [], message: 'submitMany takes an array of run inputs' },
    ]);
  }
  refuseDebounce(workflow.name, 'submitMany', options);
  const priority = priorityOf(workflow.name, options);
  const start = runStart(workflow.name, options);
  const texts: string[] = [];
  const hashes: string[] = [];
  for (let i = 0; i < inputs.length; i++) {
    try {
      const { text, hash } = encodeRunInput(scope, workflow, inputs[i] as RI);
      texts.push(text);
      hashes.push(hash);
    } catch (err) {
      if (err instanceof InputValidationError) {
        throw new InputValidationError(err.workflow, err.issues, err.node, i);
      }
      throw err;
    }
  }
  if (texts.length === 0) return { runIds: [] };

  const runIds = texts.map(() => newRunId());
  const steps = stepColumns(workflow);
  const chunkOf = ({ from, to }: Chunk) => ({
    runIds: runIds.slice(from, to),
    inputs: texts.slice(from, to),
    inputHashes: hashes.slice(from, to),
    workflow: workflow.name,
    steps,
    start,
    traceparent,
    priority,
  });
  const chunks = chunksOf(texts);
  const { db } = scope;

  const { tx } = options;
  if (tx) {
    // A caller's transaction gets plain text (Tx.query), as in `insert`.
    for (const chunk of chunks) await insertRuns(tx, db, chunkOf(chunk), true);
    return { runIds };
  }
  if (chunks.length === 1) {
    await insertRuns(db.pool, db, chunkOf({ from: 0, to: texts.length }));
  } else {
    await withTransaction(db.pool, async (c) => {
      for (const chunk of chunks) await insertRuns(c, db, chunkOf(chunk));
    });
  }
  return { runIds };
}

/** A slice `[from, to)` of `submitMany`'s inputs sent as one statement. */
interface Chunk {
  from: number;
  to: number;
}

/** Cuts the encoded inputs into chunks of at most the run and byte limits (each ≥ 1 run). */
function chunksOf(texts: readonly string[]): Chunk[] {
  const chunks: Chunk[] = [];
  let from = 0;
  let bytes = 0;
  for (let i = 0; i < texts.length; i++) {
    const size = Buffer.byteLength(texts[i] as string);
    if (
      i > from &&
      (i - from >= SUBMIT_MANY_CHUNK_RUNS || bytes + size > SUBMIT_MANY_CHUNK_BYTES)
    ) {
      chunks.push({ from, to: i });
      from = i;
      bytes = 0;
    }
    bytes += size;
  }
  chunks.push({ from, to: texts.length });
  return chunks;
}

/**
 * Inserts one run, or with `key` finds the run already holding it: the insert's `ON CONFLICT`
 * returns no row, then the key's run is read and its input hash compared.
 * @throws SubmitKeyConflictError when the key's run has a different input;
 *   TransactionConflictError when the caller's transaction lost a race with another submitter
 *   (40001 under REPEATABLE READ/SERIALIZABLE, or 40P01).
 */
async function insert<RI>(
  scope: SubmitScope,
  workflow: SubmittableWorkflow<RI>,
  input: RI,
  key: string | null,
  options: SubmitOptions,
  start: RunStart,
  traceparent: string | null,
): Promise<SubmitOnceResult> {
  const { tx } = options;
  try {
    return await insertOrFind(scope, workflow, input, key, options, start, traceparent);
  } catch (err) {
    // Only the caller can retry its own transaction: tell it so, with a code to branch on.
    if (tx !== undefined && isTransactionConflict(err)) {
      throw new TransactionConflictError(
        workflow.name,
        key ?? undefined,
        (err as { code: string }).code,
        err,
      );
    }
    throw err;
  }
}

/** `insert` without the translation of a lost race. */
async function insertOrFind<RI>(
  scope: SubmitScope,
  workflow: SubmittableWorkflow<RI>,
  input: RI,
  key: string | null,
  options: SubmitOptions,
  start: RunStart,
  traceparent: string | null,
): Promise<SubmitOnceResult> {
  const { tx } = options;
  const priority = priorityOf(workflow.name, options);
  const { text, hash } = encodeRunInput(scope, workflow, input);
  const runId = newRunId();
  const on: Tx = tx ?? scope.db.pool;
  for (let i = 0; i < 5; i++) {
    // Prepared on the client's own pool; a caller's transaction gets plain text (Tx.query).
    const rows = await insertRun(
      on,
      scope.db,
      {
        runId,
        workflow: workflow.name,
        input: text,
        submitKey: key,
        inputHash: hash,
        steps: stepColumns(workflow),
        start,
        traceparent,
        priority,
      },
      tx !== undefined,
    );
    if (rows[0]) return { runId: rows[0].id, created: true };
    // The key has a run (committed: ON CONFLICT waited for it).
    const existing = await findRunByKey(on, scope.db, { workflow: workflow.name, key });
    if (existing) {
      if (existing.input_hash !== hash)
        throw new SubmitKeyConflictError(workflow.name, key as string, existing.id);
      return { runId: existing.id, created: false };
    }
    // The conflicting run vanished between the statements (deleted by retention): try again.
  }
  throw new Error(`submitOnce(${workflow.name}): the key's run kept changing; try again`);
}

/**
 * A run input validated (validateRunInput), encoded as stored JSON text and hashed (the hash a
 * submit key's later submissions are compared with).
 * @throws InputValidationError as validateRunInput, or for a payload that is not storable JSON
 *   or is over `maxPayloadBytes`.
 */
function encodeRunInput<RI>(
  scope: SubmitScope,
  workflow: SubmittableWorkflow<RI>,
  input: RI,
): { text: string; hash: string } {
  const value = validateRunInput(workflow, input);
  const encoded = wrapPayload(workflow.name, () =>
    encodePayload(value, scope.maxPayloadBytes, 'the run input'),
  );
  // The normalised value is the text's data (plain JSON, `__proto__` an own key as JSON.parse
  // makes it), so its canonical JSON, and hash, are the text's: no parse of the text again.
  return { text: encoded.text, hash: hashJson(encoded.value) };
}

/**
 * The run input checked against the workflow's schema (its parsed value), then each root node's
 * mapped input against its action's schema.
 * @throws InputValidationError naming the node when a root's mapping throws or fails.
 */
function validateRunInput<RI>(workflow: SubmittableWorkflow<RI>, input: RI): unknown {
  let value: unknown = input;
  if (workflow.inputSchema) {
    const r = workflow.inputSchema.safeParse(input);
    if (!r.success) throw new InputValidationError(workflow.name, zodIssues(r.error.issues));
    value = r.data;
  }
  for (const n of workflow.nodes) {
    if (n.after.length > 0 || !n.action.inputSchema) continue;
    let mapped: unknown;
    try {
      mapped = n.input ? n.input(value as RI, {}) : value;
    } catch (err) {
      throw new InputValidationError(
        workflow.name,
        [{ path: [], message: `input mapping threw: ${(err as Error)?.message ?? String(err)}` }],
        n.name,
      );
    }
    const r = n.action.inputSchema.safeParse(mapped);
    if (!r.success)
      throw new InputValidationError(workflow.name, zodIssues(r.error.issues), n.name);
  }
  return value;
}

/** Runs `fn`, turning a `PayloadError` into the `InputValidationError` submit promises. */
function wrapPayload<T>(workflow: string, fn: () => T): T {
  try {
    return fn();
  } catch (err) {
    if (err instanceof PayloadError) {
      throw new InputValidationError(workflow, [
        {
          path: err.path
            .replace(/^\$\.?/, '')
            .split('.')
            .filter(Boolean),
          message: err.message,
          code: 'payload',
        },
      ]);
    }
    throw err;
  }
}
