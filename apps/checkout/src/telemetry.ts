/**
 * OpenTelemetry for the checkout processes, off unless an exporter is configured by the standard
 * OTEL_* variables, as the OpenTelemetry SDK reads them (docs/observability.md):
 *
 * - OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_TRACES_EXPORTER / OTEL_METRICS_EXPORTER = otlp, with
 *   OTEL_EXPORTER_OTLP_PROTOCOL, _HEADERS…): traces and metrics over OTLP;
 * - OTEL_METRICS_EXPORTER=prometheus: the official Prometheus exporter serves `/metrics` on
 *   OTEL_EXPORTER_PROMETHEUS_HOST:OTEL_EXPORTER_PROMETHEUS_PORT (default 0.0.0.0:9464; give each
 *   process on a host its own port);
 * - OTEL_TRACES_EXPORTER=console / OTEL_METRICS_EXPORTER=console: printed, to try it out.
 *
 * A signal whose exporter is not named is not exported (the SDK alone would default to OTLP on
 * localhost). With none configured the SDK is not even loaded: Cyclone's calls through
 * `@opentelemetry/api` stay no-ops. The HTTP instrumentation puts the API's requests and the
 * workers' provider calls in the traces, so one order reads from `POST /orders` to each provider
 * call.
 *
 * Imported first by each process's main module: the SDK must be registered before Cyclone's
 * client and worker are made (they look for it once) and before `http` is loaded (to instrument
 * it). It starts synchronously, as the module is evaluated.
 */
import { createRequire } from 'node:module';
import { basename } from 'node:path';
import type { HttpInstrumentation } from '@opentelemetry/instrumentation-http';
import type { NodeSDK } from '@opentelemetry/sdk-node';

/** The running SDK of this process, if any. */
export interface Telemetry {
  /** What is exported where, one line per signal, for the process's start-up message. */
  readonly describe: string[];
  /** Flushes what is buffered and stops the exporters (before the process exits). */
  shutdown(): Promise<void>;
}

const env = process.env;
const set = (name: string) => (env[name] ?? '').trim() !== '';

/**
 * The exporters asked for: an OTLP endpoint alone turns on OTLP for traces and metrics; a
 * signal's own variable (`OTEL_TRACES_EXPORTER`, `OTEL_METRICS_EXPORTER`) names its exporters.
 */
function exportersOf(signal: 'TRACES' | 'METRICS'): string[] {
  const named = env[`OTEL_${signal}_EXPORTER`];
  if (named !== undefined && named.trim() !== '') {
    return named
      .split(',')
      .map((s) => s.trim())
      .filter((s) => s !== '' && s !== 'none');
  }
  return set('OTEL_EXPORTER_OTLP_ENDPOINT') || set(`OTEL_EXPORTER_OTLP_${signal}_ENDPOINT`)
    ? ['otlp']
    : [];
}

function start(): Telemetry | undefined {
  if ((env.OTEL_SDK_DISABLED ?? '').toLowerCase() === 'true') return undefined;
  const traces = exportersOf('TRACES');
  const metrics = exportersOf('METRICS');
  if (traces.length === 0 && metrics.length === 0) return undefined;
  // The SDK reads these itself; a signal not asked for is off rather than OTLP by default.
  env.OTEL_TRACES_EXPORTER = traces.join(',') || 'none';
  env.OTEL_METRICS_EXPORTER = metrics.join(',') || 'none';
  env.OTEL_LOGS_EXPORTER ||= 'none';

  // Loaded only now (CommonJS, synchronously): a process without telemetry never loads the SDK.
  const require = createRequire(import.meta.url);
  const { NodeSDK: Sdk } = require('@opentelemetry/sdk-node') as {
    NodeSDK: typeof NodeSDK;
  };
  const { HttpInstrumentation: Http } = require('@opentelemetry/instrumentation-http') as {
    HttpInstrumentation: typeof HttpInstrumentation;
  };
  const main = basename(process.argv[1] ?? 'checkout').replace(/(-main)?\.[cm]?[jt]s$/, '');
  const sdk = new Sdk({
    // OTEL_SERVICE_NAME wins when set; else checkout-api, checkout-worker…
    ...(set('OTEL_SERVICE_NAME') ? {} : { serviceName: `checkout-${main}` }),
    instrumentations: [
      new Http({
        // Prometheus scraping /metrics is not part of any order's story.
        ignoreIncomingRequestHook: (req) => (req.url ?? '').startsWith('/metrics'),
      }),
    ],
  });
  sdk.start();
  const where = (list: string[]) =>
    list
      .map((e) =>
        e === 'prometheus'
          ? `prometheus on :${env.OTEL_EXPORTER_PROMETHEUS_PORT || 9464}/metrics`
          : e === 'otlp'
            ? `otlp to ${env.OTEL_EXPORTER_OTLP_ENDPOINT || 'the default endpoint'}`
            : e,
      )
      .join(', ');
  return {
    describe: [
      ...(traces.length ? [`traces: ${where(traces)}`] : []),
      ...(metrics.length ? [`metrics: ${where(metrics)}`] : []),
    ],
    shutdown: () => sdk.shutdown().catch(() => {}),
  };
}

/** This process's OpenTelemetry SDK, started on import when an exporter is configured. */
export const telemetry: Telemetry | undefined = start();
