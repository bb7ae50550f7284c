/**
 * The API's reads: core's UI reader (`createUiReader` of `@cyclone/core/internal`: its own small
 * pool, every read in a read-only transaction with a statement timeout) and the idempotency
 * ledger's reads (`@cyclone/idempotency`, an optional peer: without it the ledger parts are
 * empty), turned into the API's shapes (shared/api.ts) with the redact hook applied to every
 * input, output, error and ledger body.
 */
import type {
  UiPayload,
  UiReader,
  UiRunRow,
  UiStepError,
  UiStepSummary,
} from '@cyclone/core/internal';
import { ApiFailure } from './errors.js';
import type { LedgerReads, UiLedgerRow } from './ledger-types.js';
import {
  previewPayload,
  type RedactHook,
  type RedactTarget,
  toPayload,
  utf8Prefix,
} from './payload.js';
import type {
  Count,
  HealthResponse,
  LedgerCounts,
  LedgerEntry,
  LookupHit,
  Overview,
  Payload,
  RunResponse,
  RunRow,
  RunsFilter,
  RunsResponse,
  StepDetail,
  StepErrorEntry,
  StepSummary,
  ThroughputResponse,
  UnknownResponse,
  WorkflowsResponse,
} from './shared/api.js';
import { STEP_ERRORS_MAX } from './shared/api.js';

/**
 * Loads the ledger's reads from @cyclone/idempotency; undefined when the package is not
 * installed (the UI then shows no ledger).
 */
export async function loadLedgerReads(): Promise<LedgerReads | undefined> {
  try {
    const m: Partial<LedgerReads> = await import('@cyclone/idempotency');
    return typeof m.readLedgerOfRun === 'function' ? (m as LedgerReads) : undefined;
  } catch {
    return undefined;
  }
}

/** Largest value read whole to be redacted (1 GB, under PostgreSQL's int4 `left()` argument). */
const WHOLE = 1_000_000_000;
/** Most nodes of one run in an answer. */
const MAX_STEPS = 2000;

/** The reads the routes call, with the options they share. */
export class Reads {
  constructor(
    private readonly reader: UiReader,
    private readonly ledger: Promise<LedgerReads | undefined>,
    private readonly redact: RedactHook | undefined,
    private readonly previewBytes: number,
  ) {}

  /**
   * True when the ledger can be shown: @cyclone/idempotency is installed here and its table
   * exists in the database (its count of unknown outcomes, capped at 1, is null otherwise).
   */
  async hasLedger(): Promise<boolean> {
    const ledger = await this.ledger;
    if (!ledger) return false;
    const c = await this.reader.read((q) => ledger.countUnknownOutcomes(q, this.reader.q, 1));
    return c !== null;
  }

  /** `GET /api/overview`. */
  async overview(): Promise<Overview> {
    const [o, unknown] = await Promise.all([this.reader.overview(), this.countUnknown()]);
    return {
      at: o.at,
      runs: {
        running: count(o.runs.running),
        failed: count(o.runs.failed),
        failedLast24h: count(o.runs.failedLast24h),
        estimatedTotal: o.runs.estimatedTotal,
      },
      steps: {
        ready: count(o.steps.ready),
        retrying: count(o.steps.retrying),
        scheduled: count(o.steps.scheduled),
        running: count(o.steps.running),
        queueLagMs: o.steps.queueLagMs,
        expiredLeases: count(o.steps.expiredLeases),
      },
      recentFailed: o.recentFailed.map(runRow),
      workers: { alive: o.workers.alive },
      unknownOutcomes: unknown,
    };
  }

  private async countUnknown(): Promise<Count | null> {
    const ledger = await this.ledger;
    if (!ledger) return null;
    const c = await this.reader.read((q) => ledger.countUnknownOutcomes(q, this.reader.q));
    return c ? count(c) : null;
  }

  /** `GET /api/stats/throughput`. */
  async throughput(o: {
    window: '1h' | '24h' | '7d';
    workflow?: string | undefined;
  }): Promise<ThroughputResponse> {
    const t = await this.reader.throughput(
      o.workflow === undefined ? { window: o.window } : { window: o.window, workflow: o.workflow },
    );
    return { window: t.window, bucketMs: t.bucketMs, points: t.points };
  }

  /** `GET /api/runs`. */
  async runs(
    f: RunsFilter & { cursor?: string | undefined; dir: 'older' | 'newer'; limit: number },
  ): Promise<RunsResponse> {
    const page = await this.reader.listRuns(definedOnly(f));
    return { items: page.items.map(runRow), next: page.next, prev: page.prev };
  }

  /** `GET /api/lookup`: run id and submit key by core, idempotency key by the ledger. */
  async lookup(q: string): Promise<LookupHit[]> {
    const hits: LookupHit[] = (await this.reader.lookup(q)).map((h) => ({
      kind: h.kind,
      runId: h.runId,
      workflow: h.workflow,
    }));
    const ledger = await this.ledger;
    if (hits.length === 0 && ledger) {
      const hit = await this.reader.read((c) => ledger.findIdempotencyKey(c, this.reader.q, q));
      if (hit) hits.push({ kind: 'idempotencyKey', runId: hit.runId, node: hit.node });
    }
    return hits;
  }

  /** `GET /api/runs/:id`: the run with its input preview, its steps and their ledger counts. */
  async run(runId: string): Promise<RunResponse> {
    const [detail, input, ledgerRows] = await Promise.all([
      this.reader.getRun(runId, { maxSteps: MAX_STEPS }),
      this.input(runId),
      this.ledgerRows(runId),
    ]);
    if (!detail) throw notFound(runId);
    const r = detail.run;
    const counts = ledgerCounts(ledgerRows);
    return {
      run: {
        ...runRow(r),
        updatedAt: r.updatedAt,
        stepsActive: r.stepsActive,
        stepsTotal: r.stepsTotal,
        input,
        debounceKey: r.debounceKey,
        traceparent: r.traceparent,
      },
      steps: detail.steps.map((s) => this.stepSummary(runId, s, counts)),
      truncated: detail.truncated,
    };
  }

  /** The run's input as a `Payload` (null: no such run). */
  async input(runId: string): Promise<Payload | null> {
    const target: RedactTarget = { kind: 'input', runId };
    const p = await this.reader.runInput(runId, {
      previewChars: this.redact ? WHOLE : this.previewBytes,
    });
    return p ? this.payload(p, target) : null;
  }

  /** The run's whole input as JSON text, redacted; null: no such run. */
  async inputText(runId: string): Promise<string | null> {
    const p = await this.reader.runInput(runId, { previewChars: WHOLE });
    if (!p) return null;
    return this.wholeText(p.text, { kind: 'input', runId });
  }

  /** `GET /api/runs/:id/steps/:node`. */
  async step(runId: string, node: string): Promise<StepDetail> {
    const [s, ledgerRows] = await Promise.all([
      this.reader.getStep(runId, node, {
        previewChars: this.redact ? WHOLE : this.previewBytes,
        maxErrors: STEP_ERRORS_MAX,
      }),
      this.ledgerRows(runId, node),
    ]);
    if (!s) {
      throw new ApiFailure(404, 'node_not_found', `Run ${runId} has no node '${node}'.`);
    }
    const base = { kind: 'output' as const, runId, node };
    return {
      ...this.stepSummary(runId, s, ledgerCounts(ledgerRows)),
      errors: s.errors.map((e) => this.stepError(e, { ...base, kind: 'error' })),
      output: s.output ? this.payload(s.output, base) : null,
      signalled: s.signalled,
      waitDeadline: s.waitDeadline,
      delayMs: s.delayMs,
    };
  }

  /** A step's whole output as JSON text, redacted; undefined: no such step; null: no output. */
  async outputText(runId: string, node: string): Promise<string | null | undefined> {
    const o = await this.reader.stepOutput(runId, node);
    if (!o) return undefined;
    if (o.text === null) return null;
    return this.wholeText(o.text, { kind: 'output', runId, node });
  }

  /** `GET /api/runs/:id/ledger`. */
  async ledgerOf(runId: string, node?: string): Promise<LedgerEntry[]> {
    return (await this.ledgerRows(runId, node)).map((row) => this.ledgerEntry(row));
  }

  /** `GET /api/unknown`. */
  async unknown(o: {
    olderThanMs: number;
    cursor?: string | undefined;
    limit: number;
  }): Promise<UnknownResponse> {
    const ledger = await this.ledger;
    if (!ledger) return { items: [], next: null };
    const page = await this.reader
      .read((c) =>
        ledger.readUnknownOutcomes(c, this.reader.q, {
          ...definedOnly(o),
          previewChars: this.redact ? WHOLE : this.previewBytes,
        }),
      )
      .catch((err: unknown) => {
        // The ledger's reads refuse a bad cursor or limit this way.
        if (err instanceof RangeError) throw new ApiFailure(400, 'bad_request', err.message);
        throw err;
      });
    return { items: page.items.map((row) => this.ledgerEntry(row)), next: page.next };
  }

  /** `GET /api/workflows`. */
  async workflows(): Promise<WorkflowsResponse> {
    const items = await this.reader.listWorkflows();
    return {
      items: items.map((w) => ({
        workflow: w.workflow,
        running: count(w.running),
        failed: count(w.failed),
        lastCreatedAt: w.lastCreatedAt,
      })),
    };
  }

  /** `GET /api/health/workers`. */
  async health(): Promise<HealthResponse> {
    const h = await this.reader.health();
    return {
      at: h.at,
      workers: h.workers.map((w) => ({
        workerId: w.workerId,
        host: w.host,
        pid: w.pid,
        startedAt: w.startedAt,
        lastSeenAt: w.lastSeenAt,
        concurrency: w.concurrency,
        inFlight: w.inFlight,
        workflows: w.workflows,
        version: w.version,
        alive: w.alive,
      })),
      leaseOwners: h.leaseOwners,
      expiredLeases: count(h.expiredLeases),
      retrying: count(h.retrying),
      oldestDueByAction: h.oldestDueByAction,
    };
  }

  /** The runs of `filter` from `cursor` on, newest first, one page (bulk actions walk them). */
  async runsPage(
    filter: RunsFilter,
    cursor: string | undefined,
    limit: number,
  ): Promise<{ items: RunRow[]; next: string | null }> {
    const page = await this.reader.listRuns(
      definedOnly({ ...filter, cursor, dir: 'older' as const, limit }),
    );
    return { items: page.items.map(runRow), next: page.next };
  }

  private async ledgerRows(runId: string, node?: string): Promise<UiLedgerRow[]> {
    const ledger = await this.ledger;
    if (!ledger) return [];
    return this.reader.read((c) =>
      ledger.readLedgerOfRun(c, this.reader.q, runId, node, {
        previewChars: this.redact ? WHOLE : this.previewBytes,
      }),
    );
  }

  private stepSummary(
    runId: string,
    s: UiStepSummary,
    counts: Map<string, LedgerCounts>,
  ): StepSummary {
    let lastError = s.lastError;
    if (lastError !== null && this.redact) {
      const shown = this.redact(
        { attempt: s.attempt, at: null, kind: s.lastErrorKind, message: lastError, stack: null },
        { kind: 'error', runId, node: s.node },
      ) as { message?: unknown } | undefined;
      lastError = typeof shown?.message === 'string' ? shown.message : null;
    }
    return {
      node: s.node,
      action: s.action,
      state: s.state,
      attempt: s.attempt,
      maxAttempts: s.maxAttempts,
      depsRemaining: s.depsRemaining,
      upstream: s.upstream,
      downstream: s.downstream,
      ancestors: s.ancestors,
      scheduledAt: s.scheduledAt,
      leaseOwner: s.leaseOwner,
      leaseExpiresAt: s.leaseExpiresAt,
      startedAt: s.startedAt,
      completedAt: s.completedAt,
      durationMs: s.durationMs,
      snoozes: s.snoozes,
      errorCount: s.errorCount,
      lastError,
      lastErrorKind: s.lastErrorKind,
      outputBytes: s.outputBytes,
      waitFor: s.waitFor,
      reopenedAfterAttempt: s.reopenedAfterAttempt,
      ledger: counts.get(s.node) ?? { started: 0, succeeded: 0, failed: 0, unknown: 0 },
    };
  }

  private stepError(e: UiStepError, target: RedactTarget): StepErrorEntry {
    const entry: StepErrorEntry = {
      attempt: e.attempt,
      at: e.at,
      kind: e.kind,
      message: e.message,
      stack: e.stack,
    };
    if (!this.redact) return entry;
    const shown = this.redact(entry, target) as Partial<StepErrorEntry> | undefined;
    return {
      attempt: entry.attempt,
      at: entry.at,
      kind: entry.kind,
      message: typeof shown?.message === 'string' ? shown.message : '[hidden]',
      stack: typeof shown?.stack === 'string' ? shown.stack : null,
    };
  }

  private ledgerEntry(row: UiLedgerRow): LedgerEntry {
    const target = { runId: row.runId, node: row.node };
    return {
      runId: row.runId,
      key: row.key,
      node: row.node,
      scope: row.scope,
      provider: row.provider,
      operation: row.operation,
      phase: row.phase,
      generation: row.generation,
      ownerAttempt: row.ownerAttempt,
      calls: row.calls,
      callStartedAt: row.callStartedAt,
      providerRef: row.providerRef,
      result: this.ledgerBody(row.result, row.resultBytes, { ...target, kind: 'ledgerResult' }),
      error: this.ledgerBody(row.error, null, { ...target, kind: 'ledgerError' }),
      createdAt: row.createdAt,
      updatedAt: row.updatedAt,
    };
  }

  /**
   * A ledger body the ledger's read may have cut (`bytes`: the whole body's size, when known; else
   * a body that does not parse is taken as cut). A whole body goes through `toPayload`; a cut one
   * cannot be parsed, so with a redact hook it is hidden rather than shown unredacted.
   */
  private ledgerBody(
    text: string | null,
    bytes: number | null,
    target: RedactTarget,
  ): Payload | null {
    if (text === null) return null;
    const size = Buffer.byteLength(text, 'utf8');
    const whole = bytes !== null ? bytes <= size : parses(text);
    if (whole) return toPayload(text, target, this.redact, this.previewBytes);
    if (this.redact) return { bytes: bytes ?? size, truncated: true, text: '', hidden: true };
    return { bytes: bytes ?? size, truncated: true, text: utf8Prefix(text, this.previewBytes) };
  }

  /** A reader payload as the API's: whole (and so redactable) or a preview cut by the database. */
  private payload(p: UiPayload, target: RedactTarget): Payload | null {
    if (!p.truncated) return toPayload(p.text, target, this.redact, this.previewBytes);
    // Cut by the database: only read so when no hook is set (see `input` and `step`).
    return previewPayload(p.text, p.bytes, this.previewBytes);
  }

  private wholeText(text: string, target: RedactTarget): string {
    if (!this.redact) return text;
    const value = this.redact(JSON.parse(text), target);
    return value === undefined ? 'null' : JSON.stringify(value);
  }
}

/** 404 `run_not_found`. */
export function notFound(runId: string): ApiFailure {
  return new ApiFailure(404, 'run_not_found', `No run has id ${runId}.`);
}

function count(c: { count: number; capped: boolean }): Count {
  return { count: c.count, capped: c.capped };
}

function runRow(r: UiRunRow): RunRow {
  return {
    runId: r.runId,
    workflow: r.workflow,
    state: r.state,
    submitKey: r.submitKey,
    stepsRemaining: r.stepsRemaining,
    createdAt: r.createdAt,
    completedAt: r.completedAt,
  };
}

function ledgerCounts(rows: UiLedgerRow[]): Map<string, LedgerCounts> {
  const counts = new Map<string, LedgerCounts>();
  for (const row of rows) {
    let c = counts.get(row.node);
    if (!c) {
      c = { started: 0, succeeded: 0, failed: 0, unknown: 0 };
      counts.set(row.node, c);
    }
    c[row.phase]++;
  }
  return counts;
}

function parses(text: string): boolean {
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
}

/** `o` without its undefined fields (the reader's options are exact optional properties). */
function definedOnly<T extends object>(o: T): { [K in keyof T]: Exclude<T[K], undefined> } {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as {
    [K in keyof T]: Exclude<T[K], undefined>;
  };
}
