/**
 * OpenTelemetry of `once`: each call is a `cyclone.once` span, a child of its attempt's
 * `cyclone.step` span in the run's trace, with the idempotency key and the ledger's decision
 * (called, replayed, reconciled, unknown); the unknown outcomes open are a gauge. Read back
 * through an in-memory SDK registered before the client and the worker.
 */
import { Client, type Context, newAction, newWorkflow, type Worker } from '@cyclone/core';
import { metrics, SpanKind, SpanStatusCode } from '@opentelemetry/api';
import {
  AggregationTemporality,
  type CollectionResult,
  MeterProvider,
  MetricReader,
} from '@opentelemetry/sdk-metrics';
import {
  InMemorySpanExporter,
  NodeTracerProvider,
  type ReadableSpan,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-node';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { once, resolveKey, type UnknownPolicy } from '../src/index.js';
import { createTestDb, type TestDb } from './support/db.js';
import { startWorker } from './support/harness.js';
import { type EffectResponse, FakeProvider, findEffects, postEffect } from './support/provider.js';

class TestReader extends MetricReader {
  constructor() {
    super({ aggregationTemporalitySelector: () => AggregationTemporality.DELTA });
  }
  protected async onForceFlush(): Promise<void> {}
  protected async onShutdown(): Promise<void> {}
}

const exporter = new InMemorySpanExporter();
const reader = new TestReader();
let db: TestDb;
let client: Client;
let worker: Worker | undefined;
let provider: FakeProvider;

interface SendInput {
  to: string;
  policy: 'fail' | 'reconcile';
  /** Call twice under one key (the second replays the first). */
  twice?: boolean;
}

const policyOf = (p: SendInput['policy']): UnknownPolicy<EffectResponse> =>
  p === 'reconcile'
    ? async (key) => {
        const found = await findEffects(provider.url, key);
        return found.length === 1 ? found[0] : undefined;
      }
    : p;

const send = newAction(
  'otel_send',
  async (ctx: Context, input: SendInput) => {
    const call = () =>
      once(
        ctx,
        {
          request: { to: input.to },
          provider: 'fake',
          operation: 'POST /effects',
          onUnknown: policyOf(input.policy),
          quietPeriodMs: 300,
        },
        (key) => postEffect(provider.url, key, { to: input.to }),
      );
    const first = await call();
    return input.twice ? call() : first;
  },
  { maxAttempts: 100, backoff: () => 50 },
);
const SendFlow = newWorkflow<SendInput>('otel_send', { nodes: { send: { action: send } } });

beforeAll(async () => {
  // Before the client and the worker: they look for the providers once.
  new NodeTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }).register();
  metrics.setGlobalMeterProvider(new MeterProvider({ readers: [reader] }));
  db = await createTestDb();
  client = new Client({ connectionString: db.url, poolSize: 4 });
});

afterEach(async () => {
  await worker?.stop({ graceMs: 1_000 });
  worker = undefined;
  await provider?.close();
});

afterAll(async () => {
  await client?.close();
  await db?.drop();
});

/** The finished spans of `runId`'s trace: its step spans and their `once` spans, in order. */
function traceOf(runId: string): { steps: ReadableSpan[]; onces: ReadableSpan[] } {
  const all = exporter.getFinishedSpans();
  const steps = all.filter(
    (s) => s.name === 'cyclone.step' && s.attributes['cyclone.run_id'] === runId,
  );
  const ids = new Set(steps.map((s) => s.spanContext().spanId));
  const onces = all.filter(
    (s) => s.name === 'cyclone.once' && ids.has(s.parentSpanContext?.spanId ?? ''),
  );
  return { steps, onces };
}

const decisions = (spans: ReadableSpan[]) =>
  spans.map((s) => [
    s.attributes['cyclone.idempotency.decision'],
    s.attributes['cyclone.idempotency.outcome'],
  ]);

function gauge(collected: CollectionResult, name: string): number | undefined {
  for (const scope of collected.resourceMetrics.scopeMetrics) {
    for (const m of scope.metrics) {
      if (m.descriptor.name === name) return m.dataPoints[0]?.value as number | undefined;
    }
  }
  return undefined;
}

async function lostResponse(input: SendInput) {
  provider = await FakeProvider.start();
  provider.inject('drop');
  worker = await startWorker(client, [SendFlow]);
  const { runId } = await client.submit(SendFlow, input);
  const run = await client.waitForRun(runId, { timeoutMs: 20_000 });
  return { runId, key: `${runId}:send`, run };
}

describe('cyclone.once spans', () => {
  it('called, then replayed under the same key: children of the step span, with the key', async () => {
    provider = await FakeProvider.start();
    worker = await startWorker(client, [SendFlow]);
    const { runId } = await client.submit(SendFlow, {
      to: 'a@example.com',
      policy: 'fail',
      twice: true,
    });
    expect((await client.waitForRun(runId)).state).toBe('completed');
    const { steps, onces } = traceOf(runId);
    expect(steps).toHaveLength(1);
    const step = steps[0] as ReadableSpan;
    expect(decisions(onces)).toEqual([
      ['called', 'succeeded'],
      ['replayed', 'succeeded'],
    ]);
    for (const s of onces) {
      expect(s.kind).toBe(SpanKind.CLIENT);
      expect(s.spanContext().traceId).toBe(step.spanContext().traceId);
      expect(s.attributes).toMatchObject({
        'cyclone.idempotency.key': `${runId}:send`,
        'cyclone.idempotency.provider': 'fake',
        'cyclone.idempotency.operation': 'POST /effects',
      });
      expect(s.status.code).toBe(SpanStatusCode.UNSET);
    }
    expect(provider.received).toHaveLength(1);
  });

  it("a lost response, policy 'fail': called (ambiguous), unknown while quiet and after, then replayed once resolved; the gauge counts it open meanwhile", async () => {
    await reader.collect();
    const { runId, key, run } = await lostResponse({ to: 'b@example.com', policy: 'fail' });
    expect(run.state).toBe('failed');
    const first = traceOf(runId).onces;
    const decided = decisions(first);
    // Attempt 1 called and lost the response; attempt 2 snoozed through the quiet period (one
    // or more `unknown` snoozes), then policy fail gave it to an operator (`unknown`, an error).
    expect(decided[0]).toEqual(['called', 'ambiguous']);
    expect(decided.slice(1).every(([d]) => d === 'unknown')).toBe(true);
    expect(decided.length).toBeGreaterThanOrEqual(3);
    const called = first[0] as ReadableSpan;
    expect(called.status.code).toBe(SpanStatusCode.ERROR);
    const quiet = first[1] as ReadableSpan;
    expect(quiet.attributes['cyclone.snooze.code']).toBe('IDEMPOTENCY_IN_PROGRESS');
    expect(quiet.status.code).toBe(SpanStatusCode.UNSET);
    const given = first.at(-1) as ReadableSpan;
    expect(given.status.code).toBe(SpanStatusCode.ERROR);
    expect(given.events.map((e) => e.name)).toEqual(['exception']);

    expect(gauge(await reader.collect(), 'cyclone.idempotency.unknown_outcomes')).toBe(1);

    // The operator records what happened and retries: replayed, no call; nothing open.
    const effect = provider.effects[0] as { id: string };
    await resolveKey(client, key, {
      outcome: 'succeeded',
      result: { id: effect.id, key, request: { to: 'b@example.com' } },
    });
    await client.retry(runId, 'send');
    expect((await client.waitForRun(runId, { timeoutMs: 20_000 })).state).toBe('completed');
    expect(decisions(traceOf(runId).onces).at(-1)).toEqual(['replayed', 'succeeded']);
    expect(gauge(await reader.collect(), 'cyclone.idempotency.unknown_outcomes')).toBe(0);
    expect(provider.received).toHaveLength(1);
  });

  it('a lost response, reconciled: the reconcile function found the effect, no second call', async () => {
    const { runId, run } = await lostResponse({ to: 'c@example.com', policy: 'reconcile' });
    expect(run.state).toBe('completed');
    const decided = decisions(traceOf(runId).onces);
    expect(decided[0]).toEqual(['called', 'ambiguous']);
    expect(decided.at(-1)).toEqual(['reconciled', 'succeeded']);
    expect(provider.received).toHaveLength(1);
  });
});
