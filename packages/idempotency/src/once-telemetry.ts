/**
 * OpenTelemetry of `once`, through `@opentelemetry/api` only: each call is a `cyclone.once` span
 * (client kind, a child of the step's `cyclone.step` span) with its idempotency key and what the
 * ledger decided, and the unknown outcomes open are a gauge. Whether an SDK is registered is read
 * once per client, at its first `once`; without one, `once` makes no span, no attribute object
 * and no metric.
 */
import type { Client } from '@cyclone/core';
import { recordError, registeredMeter, registeredTracer } from '@cyclone/core/internal';
import {
  type ObservableCallback,
  type ObservableGauge,
  type Span,
  SpanKind,
  type Tracer,
} from '@opentelemetry/api';
import { DefinitiveFailureError, InProgressError, UnknownOutcomeError } from './errors.js';
import type { Normalised } from './once-options.js';
import * as sql from './sql.js';

/** The instrumentation scope of this package's spans and metrics. */
const SCOPE = '@cyclone/idempotency';

/**
 * What the ledger decided for a call: `called` (the call was made: a first call, a re-call after
 * an unknown outcome, or a reconcile that found nothing), `replayed` (a stored success or
 * definitive failure answered, no call), `reconciled` (the reconcile function found the effect,
 * no call) or `unknown` (an earlier call's outcome is unknown and stays so for now: the quiet
 * period is not over, or policy `fail` gave it to an operator).
 */
export type LedgerDecision = 'called' | 'replayed' | 'reconciled' | 'unknown';

/** Attribute keys of the `cyclone.once` span. */
const ATTR = {
  key: 'cyclone.idempotency.key',
  provider: 'cyclone.idempotency.provider',
  operation: 'cyclone.idempotency.operation',
  decision: 'cyclone.idempotency.decision',
  recall: 'cyclone.idempotency.recall',
  outcome: 'cyclone.idempotency.outcome',
  snoozeCode: 'cyclone.snooze.code',
  snoozeDelayMs: 'cyclone.snooze.delay_ms',
} as const;

/** The most unknown outcomes the gauge counts (its statement reads no further). */
const UNKNOWN_COUNT_CAP = 10_000;

/** Each client's tracer (null: none registered), looked up at its first `once`. */
const tracers = new WeakMap<Client, Tracer | null>();

/**
 * The tracer of `client`'s `once` calls, or undefined without an SDK. The first look for a client
 * also starts the gauge of its unknown outcomes when a meter provider is registered.
 */
export function onceTracer(client: Client): Tracer | undefined {
  let tracer = tracers.get(client);
  if (tracer === undefined) {
    tracer = registeredTracer(SCOPE) ?? null;
    tracers.set(client, tracer);
    observeUnknownOutcomes(client);
  }
  return tracer ?? undefined;
}

/** A `once` call being traced: the guarded protocol tells it what the ledger decided. */
export class OnceSpan {
  private decision: LedgerDecision | undefined;

  constructor(private readonly span: Span) {}

  /** The ledger's decision (the first one told stands: a call after it is the same call). */
  decided(decision: LedgerDecision, recall = false): void {
    if (this.decision) return;
    this.decision = decision;
    this.span.setAttribute(ATTR.decision, decision);
    if (recall) this.span.setAttribute(ATTR.recall, true);
  }

  /** The call succeeded (or its stored success was replayed). */
  succeeded(): void {
    this.span.setAttribute(ATTR.outcome, 'succeeded');
    this.span.end();
  }

  /** `once` threw `err`: the decision it implies, the call's outcome, the error. */
  failed(err: unknown): void {
    const span = this.span;
    if (!this.decision) {
      if (InProgressError.isInstance(err) || UnknownOutcomeError.isInstance(err)) {
        this.decided('unknown');
      } else if (DefinitiveFailureError.isInstance(err) && err.replayed) {
        this.decided('replayed');
      }
    }
    const e = err as { outcome?: { kind?: unknown }; delayMs?: unknown; code?: unknown } | null;
    if (typeof e?.outcome?.kind === 'string') span.setAttribute(ATTR.outcome, e.outcome.kind);
    if (typeof e?.delayMs === 'number' && typeof e.code === 'string') {
      // A snooze (the quiet period, a rate limit): the step waits, nothing failed.
      span.setAttribute(ATTR.snoozeCode, e.code);
      span.setAttribute(ATTR.snoozeDelayMs, e.delayMs);
      span.recordException(err as Error);
    } else {
      recordError(span, err);
    }
    span.end();
  }
}

/** Runs `guarded` in a `cyclone.once` span (active, so the provider call's spans are its children). */
export function tracedOnce<T, R>(
  tracer: Tracer,
  opts: Normalised<T>,
  guarded: (span: OnceSpan) => Promise<R>,
): Promise<R> {
  const attributes: Record<string, string> = { [ATTR.key]: opts.key };
  if (opts.provider !== null) attributes[ATTR.provider] = opts.provider;
  if (opts.operation !== null) attributes[ATTR.operation] = opts.operation;
  return tracer.startActiveSpan(
    'cyclone.once',
    { kind: SpanKind.CLIENT, attributes },
    async (span) => {
      const traced = new OnceSpan(span);
      try {
        const result = await guarded(traced);
        traced.succeeded();
        return result;
      } catch (err) {
        traced.failed(err);
        throw err;
      }
    },
  );
}

/** The gauge, made once per process when a meter provider is registered. */
let unknownGauge: ObservableGauge | undefined;

/**
 * Reports `client`'s unknown outcomes open (a capped count, by the partial index of migration
 * 000002) at each collection, until its pool is closed. Every process that calls `once` reports
 * the same database-wide count: aggregate with `max`, not `sum`.
 */
function observeUnknownOutcomes(client: Client): void {
  const meter = registeredMeter(SCOPE);
  if (!meter) return;
  unknownGauge ??= meter.createObservableGauge('cyclone.idempotency.unknown_outcomes', {
    description: `Ledger rows whose call has an unknown outcome (counted up to ${UNKNOWN_COUNT_CAP})`,
    unit: '{call}',
  });
  const gauge = unknownGauge;
  const { pool, q } = client.db;
  const callback: ObservableCallback = async (result) => {
    if (pool.ending || pool.ended) {
      gauge.removeCallback(callback);
      return;
    }
    try {
      const { rows } = await pool.query<{ n: number }>(sql.countUnknown(q), [UNKNOWN_COUNT_CAP]);
      result.observe(rows[0]?.n ?? 0);
    } catch {
      // Nothing observed this time: the gauge shows a gap rather than a wrong value.
    }
  };
  gauge.addCallback(callback);
}
