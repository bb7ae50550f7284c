/**
 * Row 13s's worker child: the OpenTelemetry SDK registered, then the usual child (child.ts).
 * Spans are batched to an exporter that drops them; metrics are aggregated and collected once a
 * minute (never within a run, so the ready-steps statement does not run): the cost measured is
 * making the spans and recording the metrics.
 */
import { metrics } from '@opentelemetry/api';
import { MeterProvider, MetricReader } from '@opentelemetry/sdk-metrics';
import { BatchSpanProcessor, NodeTracerProvider } from '@opentelemetry/sdk-trace-node';

/** A reader nothing collects from during a run. */
class IdleReader extends MetricReader {
  protected async onForceFlush(): Promise<void> {}
  protected async onShutdown(): Promise<void> {}
}

new NodeTracerProvider({
  spanProcessors: [
    new BatchSpanProcessor({
      export: (_spans, done) => done({ code: 0 }),
      shutdown: async () => {},
    }),
  ],
}).register();
metrics.setGlobalMeterProvider(new MeterProvider({ readers: [new IdleReader()] }));

// The worker is made after this line: it finds the providers registered.
await import('./child.js');
