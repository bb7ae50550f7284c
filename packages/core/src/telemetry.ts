/**
 * OpenTelemetry, through `@opentelemetry/api` only: the `cyclone.submit` and `cyclone.step` spans
 * and the worker's metrics (docs/observability.md lists them with their attributes). The
 * application's SDK, when it registered one, records and exports them.
 *
 * Whether an SDK is registered is read once: by a client at its first submit, by a worker when it
 * is made. Without one, the hot path does no telemetry work at all (no span, no attribute object,
 * no clock read): every call site tests one field that is `undefined`.
 *
 * The trace context of a submit is stored with its run as a W3C `traceparent`, so each attempt's
 * step span is a child of the submit span, whichever process runs it and however much later.
 */
import {
  type Attributes,
  type BatchObservableCallback,
  type Counter,
  context,
  createNoopMeter,
  type Histogram,
  isSpanContextValid,
  type Meter,
  metrics,
  type ObservableGauge,
  type Context as OtelContext,
  ProxyTracerProvider,
  ROOT_CONTEXT,
  type Span,
  SpanKind,
  SpanStatusCode,
  type Tracer,
  type TracerProvider,
  trace,
} from '@opentelemetry/api';
import type { Logger } from './logger.js';
import type { Recorded } from './recorded.js';
import type { ClaimedStep } from './sql/claim.js';
import type { QueueStats } from './sql/metrics.js';
import type { SweptStep } from './sql/sweep.js';

/** The instrumentation scope of core's spans and metrics. */
export const SCOPE = '@cyclone/core';

/** Attribute keys (docs/observability.md). */
export const ATTR = {
  runId: 'cyclone.run_id',
  workflow: 'cyclone.workflow',
  node: 'cyclone.node',
  action: 'cyclone.action',
  attempt: 'cyclone.attempt',
  outcome: 'cyclone.outcome',
  errorKind: 'cyclone.error.kind',
  snoozeCode: 'cyclone.snooze.code',
  snoozeDelayMs: 'cyclone.snooze.delay_ms',
  state: 'cyclone.state',
  submitForm: 'cyclone.submit.form',
  submitRuns: 'cyclone.submit.runs',
  submitCreated: 'cyclone.submit.created',
  submitDebounced: 'cyclone.submit.debounced',
} as const;

/** The most ready steps the `cyclone.steps.ready` gauge counts (its statement reads no further). */
export const READY_COUNT_CAP = 10_000;

// What the API answers when no SDK registered a tracer provider: the delegate of a proxy that
// was never given one.
const NOOP_TRACER_PROVIDER = new ProxyTracerProvider().getDelegate();

/** The registered tracer provider's tracer for `scope`, or undefined when none is registered. */
export function registeredTracer(scope: string): Tracer | undefined {
  // The global is a proxy (possibly of another copy of the API) that delegates to the SDK's.
  const p = trace.getTracerProvider() as TracerProvider & { getDelegate?(): TracerProvider };
  const delegate = typeof p.getDelegate === 'function' ? p.getDelegate() : p;
  return delegate === NOOP_TRACER_PROVIDER ? undefined : trace.getTracer(scope);
}

/** The registered meter provider's meter for `scope`, or undefined when none is registered. */
export function registeredMeter(scope: string): Meter | undefined {
  const meter = metrics.getMeter(scope);
  return meter === createNoopMeter() ? undefined : meter;
}

/** Records `err` on `span` as an exception event and an error status. */
export function recordError(span: Span, err: unknown): void {
  if (err instanceof Error) {
    span.recordException(err);
    span.setStatus({ code: SpanStatusCode.ERROR, message: err.message });
  } else {
    const message = String(err);
    span.recordException(message);
    span.setStatus({ code: SpanStatusCode.ERROR, message });
  }
}

/** `span`'s context as a W3C traceparent (version 00), or null when it has none. */
export function traceparentOf(span: Span): string | null {
  const sc = span.spanContext();
  if (!isSpanContextValid(sc)) return null;
  return `00-${sc.traceId}-${sc.spanId}-${(sc.traceFlags & 0xff).toString(16).padStart(2, '0')}`;
}

const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

/**
 * A context whose remote parent is the span of `traceparent` (as `traceparentOf` wrote it); the
 * root context when there is none or it is not one.
 */
export function contextOf(traceparent: string | null): OtelContext {
  const m = traceparent ? TRACEPARENT.exec(traceparent) : null;
  if (!m) return ROOT_CONTEXT;
  const sc = {
    traceId: m[1] as string,
    spanId: m[2] as string,
    traceFlags: Number.parseInt(m[3] as string, 16),
    isRemote: true,
  };
  return isSpanContextValid(sc) ? trace.setSpanContext(ROOT_CONTEXT, sc) : ROOT_CONTEXT;
}

// ---------------------------------------------------------------------------------------------
// Submit

/** The forms of submit, as `cyclone.submit.form` names them. */
export type SubmitForm = 'submit' | 'submitOnce' | 'submitMany';

/** Each client's tracer (null: none registered), looked up at its first submit. */
const submitTracers = new WeakMap<object, Tracer | null>();

/** The tracer of the client that owns `key` (its database handle); undefined without an SDK. */
export function submitTracer(key: object): Tracer | undefined {
  let tracer = submitTracers.get(key);
  if (tracer === undefined) {
    tracer = registeredTracer(SCOPE) ?? null;
    submitTracers.set(key, tracer);
  }
  return tracer ?? undefined;
}

/**
 * Runs one submit in a `cyclone.submit` span (producer, a child of the caller's active span):
 * `fn` gets the span's traceparent to store with the runs, and `describe` names what it made.
 */
export function tracedSubmit<R>(
  tracer: Tracer,
  form: SubmitForm,
  workflow: string,
  fn: (traceparent: string | null) => Promise<R>,
  describe: (result: R) => Attributes,
): Promise<R> {
  return tracer.startActiveSpan(
    'cyclone.submit',
    { kind: SpanKind.PRODUCER, attributes: { [ATTR.workflow]: workflow, [ATTR.submitForm]: form } },
    async (span) => {
      try {
        const result = await fn(traceparentOf(span));
        span.setAttributes(describe(result));
        return result;
      } catch (err) {
        recordError(span, err);
        throw err;
      } finally {
        span.end();
      }
    },
  );
}

// ---------------------------------------------------------------------------------------------
// Worker

/** A worker's instruments (docs/observability.md § Metrics). */
interface Instruments {
  stepsFinished: Counter;
  stepDuration: Histogram;
  claimDuration: Histogram;
  leasesLost: Counter;
  sweepRecovered: Counter;
  snoozes: Counter;
  ready: ObservableGauge;
  readyAge: ObservableGauge;
}

/** Bucket bounds of the duration histograms (ms): a no-op step to a five-minute one. */
const DURATION_BUCKETS_MS = [
  1, 2, 5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000, 60_000, 300_000,
];

function instruments(meter: Meter): Instruments {
  const advice = { explicitBucketBoundaries: DURATION_BUCKETS_MS };
  return {
    stepsFinished: meter.createCounter('cyclone.steps.finished', {
      description: 'Step attempts whose outcome was recorded (or lost), by outcome',
      unit: '{step}',
    }),
    stepDuration: meter.createHistogram('cyclone.step.duration', {
      description: 'Step attempts, from the claim to the recorded outcome',
      unit: 'ms',
      advice,
    }),
    claimDuration: meter.createHistogram('cyclone.claim.duration', {
      description: 'Claim statements, each taking up to the free slots of a worker',
      unit: 'ms',
      advice,
    }),
    leasesLost: meter.createCounter('cyclone.leases.lost', {
      description: 'Step attempts whose lease was lost: another claim took the step over',
      unit: '{step}',
    }),
    sweepRecovered: meter.createCounter('cyclone.sweep.recovered', {
      description:
        'Steps whose lease expired, moved by the recovery sweep (retryable or discarded)',
      unit: '{step}',
    }),
    snoozes: meter.createCounter('cyclone.steps.snoozed', {
      description: 'Step attempts that snoozed (no attempt used), by the code of their SnoozeError',
      unit: '{step}',
    }),
    ready: meter.createObservableGauge('cyclone.steps.ready', {
      description: `Steps due and not claimed, of all workflows (counted up to ${READY_COUNT_CAP})`,
      unit: '{step}',
    }),
    readyAge: meter.createObservableGauge('cyclone.steps.ready.max_age', {
      description: 'How long the oldest ready step has been due (0 when none is)',
      unit: 'ms',
    }),
  };
}

/**
 * A worker's telemetry: its tracer and its instruments, each only when an SDK registered the
 * provider. `create()` returns undefined when neither is, and the worker then calls nothing here.
 */
export class WorkerTelemetry {
  private constructor(
    private readonly tracer: Tracer | undefined,
    private readonly m: Instruments | undefined,
  ) {}

  /** The worker's telemetry, or undefined when no tracer or meter provider is registered. */
  static create(): WorkerTelemetry | undefined {
    const tracer = registeredTracer(SCOPE);
    const meter = registeredMeter(SCOPE);
    if (!tracer && !meter) return undefined;
    return new WorkerTelemetry(tracer, meter ? instruments(meter) : undefined);
  }

  /** Starts observing a claimed step's attempt: its span (in its run's trace) and its clock. */
  beginStep(row: ClaimedStep): StepObservation {
    let span: Span | undefined;
    let ctx: OtelContext | undefined;
    if (this.tracer) {
      span = this.tracer.startSpan(
        'cyclone.step',
        {
          kind: SpanKind.CONSUMER,
          attributes: {
            [ATTR.runId]: row.run_id,
            [ATTR.workflow]: row.workflow,
            [ATTR.node]: row.node,
            [ATTR.action]: row.action,
            [ATTR.attempt]: row.attempt,
          },
        },
        contextOf(row.traceparent),
      );
      ctx = trace.setSpan(ROOT_CONTEXT, span);
    }
    return new StepObservation(row, this.m, span, ctx);
  }

  /** The clock at the start of a claim statement (0 without metrics: not read). */
  claimStarted(): number {
    return this.m ? performance.now() : 0;
  }

  /** A claim statement that started at `t0` (`claimStarted`) has returned. */
  claimEnded(t0: number): void {
    this.m?.claimDuration.record(performance.now() - t0);
  }

  /** Steps the recovery sweep moved. */
  swept(steps: readonly SweptStep[]): void {
    const m = this.m;
    if (!m) return;
    for (const s of steps) {
      m.sweepRecovered.add(1, { [ATTR.workflow]: s.workflow, [ATTR.state]: s.state });
    }
  }

  /**
   * Reports the ready steps (`read`, a capped count and the oldest one's age) at each collection
   * of the metrics, until the returned function is called.
   */
  observeQueue(read: () => Promise<QueueStats>, log: Logger): () => void {
    const m = this.m;
    if (!m) return () => {};
    const meter = registeredMeter(SCOPE) as Meter;
    const callback: BatchObservableCallback = async (result) => {
      try {
        const stats = await read();
        result.observe(m.ready, stats.ready);
        result.observe(m.readyAge, stats.maxAgeMs);
      } catch (err) {
        // Nothing observed this time: the gauges show a gap rather than a wrong value.
        log.debug({ err: String(err) }, 'could not read the ready steps for the metrics');
      }
    };
    meter.addBatchObservableCallback(callback, [m.ready, m.readyAge]);
    return () => meter.removeBatchObservableCallback(callback, [m.ready, m.readyAge]);
  }
}

/** One attempt being observed, from its claim to its recorded outcome. */
export class StepObservation {
  private readonly t0: number;

  constructor(
    private readonly row: ClaimedStep,
    private readonly m: Instruments | undefined,
    private readonly span: Span | undefined,
    private readonly ctx: OtelContext | undefined,
  ) {
    this.t0 = m ? performance.now() : 0;
  }

  /** Runs `fn` with the step's span active, so the handler's own spans are its children. */
  run<T>(fn: () => Promise<T>): Promise<T> {
    return this.ctx ? context.with(this.ctx, fn) : fn();
  }

  /** The attempt's outcome is recorded (or could not be): ends the span, counts it. */
  end(recorded: Recorded): void {
    const { row, m, span } = this;
    if (span) {
      span.setAttribute(ATTR.outcome, recorded.outcome);
      if (recorded.errorKind) span.setAttribute(ATTR.errorKind, recorded.errorKind);
      if (recorded.snooze) {
        span.setAttribute(ATTR.snoozeCode, recorded.snooze.code);
        span.setAttribute(ATTR.snoozeDelayMs, recorded.snooze.delayMs);
      }
      if (recorded.error !== undefined) recordError(span, recorded.error);
      span.end();
    }
    if (m) {
      const attrs = {
        [ATTR.workflow]: row.workflow,
        [ATTR.node]: row.node,
        [ATTR.outcome]: recorded.outcome,
      };
      m.stepsFinished.add(1, attrs);
      m.stepDuration.record(performance.now() - this.t0, attrs);
      if (recorded.outcome === 'lease_lost') {
        m.leasesLost.add(1, { [ATTR.workflow]: row.workflow, [ATTR.node]: row.node });
      } else if (recorded.snooze) {
        m.snoozes.add(1, {
          [ATTR.workflow]: row.workflow,
          [ATTR.node]: row.node,
          [ATTR.snoozeCode]: recorded.snooze.code,
        });
      }
    }
  }
}
