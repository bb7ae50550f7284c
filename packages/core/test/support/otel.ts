/**
 * OpenTelemetry for the observability tests: a tracer provider registered globally whose
 * finished spans go to a callback as plain records (the test keeps them; a worker child process
 * writes them to stdout as `SPAN <json>` lines), and a metric reader the test collects from.
 */
import { metrics } from '@opentelemetry/api';
import {
  AggregationTemporality,
  type CollectionResult,
  type DataPoint,
  type Histogram,
  MeterProvider,
  MetricReader,
} from '@opentelemetry/sdk-metrics';
import {
  NodeTracerProvider,
  type ReadableSpan,
  type SpanProcessor,
} from '@opentelemetry/sdk-trace-node';

/** A finished span, as the tests compare it (also what a child writes as JSON). */
export interface SpanRecord {
  name: string;
  /** `SpanKind` (2 producer, 3 client, 4 consumer…). */
  kind: number;
  traceId: string;
  spanId: string;
  parentSpanId: string | undefined;
  attributes: Record<string, unknown>;
  /** `SpanStatusCode` (0 unset, 1 ok, 2 error) and message. */
  status: { code: number; message?: string };
  /** Names of the span's events (`exception` for a recorded error). */
  events: string[];
  /** The process that ended it. */
  pid: number;
}

export function toRecord(span: ReadableSpan): SpanRecord {
  const sc = span.spanContext();
  return {
    name: span.name,
    kind: span.kind,
    traceId: sc.traceId,
    spanId: sc.spanId,
    parentSpanId: span.parentSpanContext?.spanId,
    attributes: { ...span.attributes },
    status: { code: span.status.code, message: span.status.message },
    events: span.events.map((e) => e.name),
    pid: process.pid,
  };
}

/**
 * Registers a tracer provider (with the AsyncLocalStorage context manager) whose every ended
 * span goes to `onEnd`, synchronously: a process killed right after a span ended has reported it.
 */
export function registerTracing(onEnd: (span: SpanRecord) => void): NodeTracerProvider {
  const processor: SpanProcessor = {
    onStart() {},
    onEnd: (span) => onEnd(toRecord(span)),
    forceFlush: async () => {},
    shutdown: async () => {},
  };
  const provider = new NodeTracerProvider({ spanProcessors: [processor] });
  provider.register();
  return provider;
}

/**
 * A reader that exports nothing: the test collects when it wants to, and each collection holds
 * what happened since the one before (delta temporality; a gauge nothing observed has no point).
 */
export class TestMetricReader extends MetricReader {
  constructor() {
    super({ aggregationTemporalitySelector: () => AggregationTemporality.DELTA });
  }

  protected async onForceFlush(): Promise<void> {}
  protected async onShutdown(): Promise<void> {}
}

/** Registers a meter provider read by the returned reader. */
export function registerMetrics(): { provider: MeterProvider; reader: TestMetricReader } {
  const reader = new TestMetricReader();
  const provider = new MeterProvider({ readers: [reader] });
  metrics.setGlobalMeterProvider(provider);
  return { provider, reader };
}

/** The points of one metric in a collection, with their attributes. */
export function pointsOf(
  collected: CollectionResult,
  name: string,
): DataPoint<number | Histogram>[] {
  const points: DataPoint<number | Histogram>[] = [];
  for (const scope of collected.resourceMetrics.scopeMetrics) {
    for (const m of scope.metrics) {
      if (m.descriptor.name === name) {
        points.push(...(m.dataPoints as DataPoint<number | Histogram>[]));
      }
    }
  }
  return points;
}

/** The value of a counter or gauge at the point whose attributes include `match`; 0 without one. */
export function metricValue(
  collected: CollectionResult,
  name: string,
  match: Record<string, unknown> = {},
): number {
  let total = 0;
  for (const p of pointsOf(collected, name)) {
    if (Object.entries(match).every(([k, v]) => p.attributes[k] === v)) {
      total += typeof p.value === 'number' ? p.value : p.value.count;
    }
  }
  return total;
}
