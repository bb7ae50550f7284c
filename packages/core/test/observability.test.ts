/**
 * OpenTelemetry: the spans and metrics of docs/observability.md, read back through an in-memory
 * SDK (the test process) and through worker child processes that write their spans to stdout.
 * - One run through two worker processes is one trace: the submit span, then a step span per
 *   attempt, each a child of the submit span; a SIGKILLed attempt's span is missing, its retry's
 *   present; a retryable failure, a discard and an operator retry stay in the same trace.
 * - Metrics after a known workload: steps finished by outcome, durations, leases lost, sweep
 *   recoveries, snoozes, the ready steps and the oldest one's age.
 * - Without an SDK: core loads none, and stores no trace context.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type ChildWorker, killAllChildren, spawnWorker } from '@cyclone/testkit';
import { SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  type Action,
  Client,
  NonRetryableError,
  newAction,
  newWorkflow,
  SnoozeError,
  silentLogger,
  Worker,
} from '../src/index.js';
import { waitFor } from './support/crash-helpers.js';
import { createTestDb, type TestDb } from './support/db.js';
import {
  metricValue,
  pointsOf,
  registerMetrics,
  registerTracing,
  type SpanRecord,
  type TestMetricReader,
} from './support/otel.js';
import { TraceFlow } from './support/otel-workflows.js';

let db: TestDb;
let client: Client;
/** Spans ended in this process. */
const spans: SpanRecord[] = [];
let reader: TestMetricReader;

beforeAll(async () => {
  // Before any client or worker: they look for the providers once.
  registerTracing((s) => spans.push(s));
  reader = registerMetrics().reader;
  db = await createTestDb();
  client = new Client({ connectionString: db.url, poolSize: 4, logger: silentLogger });
});

afterEach(async () => {
  await killAllChildren();
});

afterAll(async () => {
  await killAllChildren();
  await client?.close();
  await db?.drop();
});

const here = fileURLToPath(new URL('.', import.meta.url));

function spawnTraced(label: string, victim: boolean): Promise<ChildWorker> {
  return spawnWorker({
    script: new URL('./support/otel-worker.ts', import.meta.url),
    env: { DATABASE_URL: db.url, OTEL_VICTIM: victim ? '1' : '0' },
    label,
    ready: /^READY (\d+) (\S+)$/,
  });
}

/** The spans a child wrote to stdout. */
function spansOf(w: ChildWorker): SpanRecord[] {
  return w.lines
    .filter((l) => l.startsWith('SPAN '))
    .map((l) => JSON.parse(l.slice(5)) as SpanRecord);
}

async function runState(runId: string): Promise<string> {
  return (await client.getRun(runId)).state;
}

describe('one run through two worker processes', () => {
  it('is one trace: the submit span, then a step span per attempt, the killed one missing', async () => {
    const victim = await spawnTraced('victim', true);

    // The caller's own span (an HTTP request, say) around the submit.
    const tracer = trace.getTracer('test');
    let requestSpanId = '';
    const { runId } = await tracer.startActiveSpan(
      'POST /orders',
      { kind: SpanKind.SERVER },
      async (span) => {
        requestSpanId = span.spanContext().spanId;
        try {
          return await client.submit(TraceFlow, { orderId: 'o-1' });
        } finally {
          span.end();
        }
      },
    );
    const request = spans.find((s) => s.spanId === requestSpanId) as SpanRecord;
    const submit = spans.find((s) => s.name === 'cyclone.submit') as SpanRecord;
    expect(submit).toMatchObject({
      kind: SpanKind.PRODUCER,
      traceId: request.traceId,
      parentSpanId: request.spanId,
      attributes: {
        'cyclone.workflow': 'otel_trace',
        'cyclone.run_id': runId,
        'cyclone.submit.form': 'submit',
      },
    });
    // Stored with the run: the submit span's context, as a W3C traceparent.
    const { rows } = await db.pool.query(
      'SELECT traceparent FROM cyclone.cyclone_runs WHERE id = $1',
      [runId],
    );
    expect(rows[0].traceparent).toBe(`00-${submit.traceId}-${submit.spanId}-01`);

    // `a`'s first attempt hangs in the victim; kill it there.
    await victim.waitForLine(new RegExp(`^HANG ${runId}$`));
    await victim.kill('SIGKILL');

    // The other worker takes `a` over once the lease expires, then runs the rest: `d` is
    // discarded, the run fails, and an operator retries it.
    const rescuer = await spawnTraced('rescuer', false);
    await waitFor(
      'the run to fail at d',
      () => runState(runId),
      (s) => s === 'failed',
      30_000,
    );
    expect(await client.retry(runId, 'd')).toEqual(['d']);
    await waitFor(
      'the run to complete',
      () => runState(runId),
      (s) => s === 'completed',
      30_000,
    );
    rescuer.proc.kill('SIGTERM');
    await rescuer.waitForLine(/^STOPPED$/);

    // The victim ended no step span: its attempt died with it.
    expect(spansOf(victim).filter((s) => s.name === 'cyclone.step')).toEqual([]);
    const steps = spansOf(rescuer).filter((s) => s.name === 'cyclone.step');
    const attempts = steps.map((s) => [
      s.attributes['cyclone.node'],
      s.attributes['cyclone.attempt'],
      s.attributes['cyclone.outcome'],
    ]);
    expect(attempts).toEqual([
      ['a', 2, 'completed'],
      ['b', 1, 'completed'],
      ['c', 1, 'retryable'],
      ['c', 2, 'completed'],
      ['d', 1, 'discarded'],
      ['d', 2, 'completed'],
    ]);
    for (const s of steps) {
      // One trace, each attempt a child of the submit span, whatever process ran it.
      expect(s).toMatchObject({
        kind: SpanKind.CONSUMER,
        traceId: submit.traceId,
        parentSpanId: submit.spanId,
        pid: rescuer.pid,
        attributes: {
          'cyclone.run_id': runId,
          'cyclone.workflow': 'otel_trace',
        },
      });
    }
    const [, , c1, , d1, d2] = steps as SpanRecord[];
    // Errors recorded on the span: status, message and an exception event.
    expect(c1?.status).toEqual({
      code: SpanStatusCode.ERROR,
      message: 'flaky: the first attempt fails',
    });
    expect(c1?.events).toEqual(['exception']);
    expect(c1?.attributes['cyclone.error.kind']).toBe('error');
    expect(d1?.status.code).toBe(SpanStatusCode.ERROR);
    expect(d1?.attributes['cyclone.error.kind']).toBe('non_retryable');
    expect(d2?.status.code).toBe(SpanStatusCode.UNSET);
    expect(d2?.events).toEqual([]);
  });
});

describe('every submit form', () => {
  const Single = newWorkflow<{ n: number }>('otel_single', {
    nodes: { a: { action: newAction('otel_single_a', async () => 1) } },
  });

  it('makes a producer span in the caller context and stores its context with each run', async () => {
    spans.length = 0;
    const once = await client.submitOnce(Single, 'k-1', { n: 1 });
    const again = await client.submitOnce(Single, 'k-1', { n: 1 });
    const many = await client.submitMany(Single, [{ n: 1 }, { n: 2 }, { n: 3 }]);
    const debounced = await client.submit(Single, { n: 4 }, { debounce: { key: 'd', delayMs: 0 } });
    const inTx = await db.pool.connect();
    let txRun: string;
    try {
      await inTx.query('BEGIN');
      txRun = (await client.submit(Single, { n: 5 }, { tx: inTx })).runId;
      await inTx.query('COMMIT');
    } finally {
      inTx.release();
    }
    expect(again).toEqual({ runId: once.runId, created: false });
    const submits = spans.filter((s) => s.name === 'cyclone.submit');
    expect(submits.map((s) => [s.attributes['cyclone.submit.form'], s.kind])).toEqual([
      ['submitOnce', SpanKind.PRODUCER],
      ['submitOnce', SpanKind.PRODUCER],
      ['submitMany', SpanKind.PRODUCER],
      ['submit', SpanKind.PRODUCER],
      ['submit', SpanKind.PRODUCER],
    ]);
    expect(submits[0]?.attributes).toMatchObject({
      'cyclone.run_id': once.runId,
      'cyclone.submit.created': true,
    });
    expect(submits[1]?.attributes).toMatchObject({
      'cyclone.run_id': once.runId,
      'cyclone.submit.created': false,
    });
    expect(submits[2]?.attributes).toMatchObject({ 'cyclone.submit.runs': 3 });
    expect(submits[3]?.attributes).toMatchObject({
      'cyclone.run_id': debounced.runId,
      'cyclone.submit.debounced': false,
    });
    const traceparent = async (id: string) =>
      (await db.pool.query('SELECT traceparent FROM cyclone.cyclone_runs WHERE id = $1', [id]))
        .rows[0].traceparent;
    const ctx = (s: SpanRecord | undefined) => `00-${s?.traceId}-${s?.spanId}-01`;
    // A run keeps the context of the submit that created it.
    expect(await traceparent(once.runId)).toBe(ctx(submits[0]));
    for (const id of many.runIds) expect(await traceparent(id)).toBe(ctx(submits[2]));
    expect(await traceparent(debounced.runId)).toBe(ctx(submits[3]));
    expect(await traceparent(txRun)).toBe(ctx(submits[4]));
    // No worker carries this workflow: cancelled, so that no step of it stays ready.
    for (const id of new Set([once.runId, ...many.runIds, debounced.runId, txRun])) {
      await client.cancel(id);
    }
  });

  it('records a refused submit as an error on its span', async () => {
    spans.length = 0;
    const Typed = newWorkflow<{ n: number }>('otel_typed', {
      input: z.object({ n: z.number() }),
      nodes: { a: { action: newAction('otel_typed_a', async () => 1) } },
    });
    await expect(client.submit(Typed, { n: 'x' } as never)).rejects.toThrow();
    const [span] = spans.filter((s) => s.name === 'cyclone.submit');
    expect(span?.status.code).toBe(SpanStatusCode.ERROR);
    expect(span?.events).toEqual(['exception']);
  });
});

describe('metrics after a known workload', () => {
  const ok = newAction('m_ok', async () => 'ok');
  const flaky = newAction(
    'm_flaky',
    async (ctx) => {
      if (ctx.attempt === 1) throw new Error('first attempt fails');
      return 'ok';
    },
    { backoff: () => 0 },
  );
  // A snooze gives the attempt back: the second try is attempt 1 again.
  const snoozedOnce = new Set<string>();
  const snoozy = newAction('m_snoozy', async (ctx) => {
    if (!snoozedOnce.has(ctx.runId)) {
      snoozedOnce.add(ctx.runId);
      throw new SnoozeError(20);
    }
    return 'ok';
  });
  const refused = newAction('m_refused', async () => {
    throw new NonRetryableError('refused');
  });
  const cancelled = newAction('m_cancelled', async (ctx) => {
    await new Promise((_resolve, reject) => {
      ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason), { once: true });
    });
  });
  const one = (name: string, action: Action<unknown, unknown>) =>
    newWorkflow<Record<string, never>>(name, { nodes: { a: { action } } });
  const Ok = one('m_ok', ok);
  const Flaky = one('m_flaky', flaky);
  const Snoozy = one('m_snoozy', snoozy);
  const Refused = one('m_refused', refused);
  const Cancelled = one('m_cancelled', cancelled);
  // Carried by no worker: its steps stay ready.
  const Orphan = one('m_orphan', ok);

  it('counts each outcome, times steps and claims, and reads the queue', async () => {
    // Only what this test's worker does counts: each collection holds what happened since the last.
    await reader.collect();
    const worker = new Worker({
      client,
      workflows: [Ok, Flaky, Snoozy, Refused, Cancelled],
      concurrency: 8,
      leaseMs: 1_500,
      sweepIntervalMs: 100,
      pollIntervalMs: 50,
      logger: silentLogger,
    });
    await worker.start();
    try {
      const { runIds: oks } = await client.submitMany(Ok, [{}, {}, {}, {}, {}]);
      const { runIds: flakies } = await client.submitMany(Flaky, [{}, {}]);
      const { runId: snoozed } = await client.submit(Snoozy, {});
      const { runId: discarded } = await client.submit(Refused, {});
      const { runId: lost } = await client.submit(Cancelled, {});
      for (const id of [...oks, ...flakies, snoozed]) {
        expect((await client.waitForRun(id)).state).toBe('completed');
      }
      expect((await client.waitForRun(discarded)).state).toBe('failed');
      // Cancelled while its handler runs: the heartbeat finds the lease gone.
      await waitFor(
        'the step to run',
        async () => (await client.getRun(lost)).steps[0]?.state,
        (s) => s === 'running',
      );
      await client.cancel(lost);
      await waitFor(
        'the lease loss to be seen',
        async () => worker.stats.leaseLost,
        (n) => n === 1,
      );

      // An orphan step whose lease expired (a dead worker's), and two that never ran.
      const { runIds: orphans } = await client.submitMany(Orphan, [{}, {}, {}]);
      await db.pool.query(
        `UPDATE cyclone.cyclone_steps SET state = 'running', attempt = 1, lease_owner = 'gone',
                lease_expires_at = now() - interval '1 second'
         WHERE run_id = $1`,
        [orphans[0]],
      );
      await waitFor(
        'the sweep',
        async () => worker.stats.swept,
        (n) => n === 1,
      );
      // Due a moment ago: the oldest ready step's age is above 0.
      await new Promise((r) => setTimeout(r, 50));

      const after = await reader.collect();
      const delta = (name: string, match: Record<string, unknown> = {}) =>
        metricValue(after, name, match);
      const finished = (workflow: string, outcome: string) =>
        delta('cyclone.steps.finished', {
          'cyclone.workflow': workflow,
          'cyclone.outcome': outcome,
        });
      expect(finished('m_ok', 'completed')).toBe(5);
      expect(finished('m_flaky', 'retryable')).toBe(2);
      expect(finished('m_flaky', 'completed')).toBe(2);
      expect(finished('m_snoozy', 'snoozed')).toBe(1);
      expect(finished('m_snoozy', 'completed')).toBe(1);
      expect(finished('m_refused', 'discarded')).toBe(1);
      expect(finished('m_cancelled', 'lease_lost')).toBe(1);
      expect(delta('cyclone.steps.finished')).toBe(13);
      // One duration per attempt, with the same attributes.
      expect(delta('cyclone.step.duration')).toBe(13);
      expect(delta('cyclone.step.duration', { 'cyclone.outcome': 'completed' })).toBe(8);
      expect(delta('cyclone.claim.duration')).toBeGreaterThanOrEqual(1);
      expect(
        delta('cyclone.leases.lost', { 'cyclone.workflow': 'm_cancelled', 'cyclone.node': 'a' }),
      ).toBe(1);
      expect(
        delta('cyclone.steps.snoozed', {
          'cyclone.workflow': 'm_snoozy',
          'cyclone.snooze.code': 'SNOOZE',
        }),
      ).toBe(1);
      expect(
        delta('cyclone.sweep.recovered', {
          'cyclone.workflow': 'm_orphan',
          'cyclone.state': 'retryable',
        }),
      ).toBe(1);
      expect(delta('cyclone.sweep.recovered')).toBe(1);
      // Gauges: this database's ready steps now (the orphans), and how long the oldest waited.
      expect(metricValue(after, 'cyclone.steps.ready')).toBe(3);
      expect(metricValue(after, 'cyclone.steps.ready.max_age')).toBeGreaterThan(0);
      // Units as docs/observability.md lists them.
      const unit = (name: string) =>
        after.resourceMetrics.scopeMetrics
          .flatMap((s) => s.metrics)
          .find((m) => m.descriptor.name === name)?.descriptor.unit;
      expect(unit('cyclone.step.duration')).toBe('ms');
      expect(unit('cyclone.claim.duration')).toBe('ms');
      expect(unit('cyclone.steps.finished')).toBe('{step}');
      expect(pointsOf(after, 'cyclone.steps.ready')).toHaveLength(1);
    } finally {
      await worker.stop();
    }
    // A stopped worker reads the queue no more.
    const stopped = await reader.collect();
    expect(pointsOf(stopped, 'cyclone.steps.ready')).toHaveLength(0);
  });
});

describe('without an SDK', () => {
  it('loads no OpenTelemetry SDK and stores no trace context', async () => {
    const child = await spawnWorker({
      script: new URL('./support/otel-none.ts', import.meta.url),
      env: { DATABASE_URL: db.url },
      label: 'no-sdk',
    });
    const loaded = JSON.parse((await child.waitForLine(/^LOADED (.*)$/, 30_000))[1] as string);
    const stored = JSON.parse((await child.waitForLine(/^TRACEPARENT (.*)$/))[1] as string);
    // The API is loaded (core calls it), nothing else of OpenTelemetry.
    expect(loaded.some((p: string) => p.includes('@opentelemetry/api/'))).toBe(true);
    expect(loaded.filter((p: string) => !p.includes('@opentelemetry/api/'))).toEqual([]);
    expect(stored).toEqual([null, null, null]);
  });

  it('core imports the API only, and depends on no SDK package', () => {
    const pkg = JSON.parse(readFileSync(join(here, '..', 'package.json'), 'utf8'));
    const otel = Object.keys(pkg.dependencies).filter((d) => d.startsWith('@opentelemetry/'));
    expect(otel).toEqual(['@opentelemetry/api']);
    const src = join(here, '..', 'src');
    const imports = new Set<string>();
    const walk = (dir: string) => {
      for (const e of readdirSync(dir, { withFileTypes: true })) {
        const p = join(dir, e.name);
        if (e.isDirectory()) walk(p);
        else if (e.name.endsWith('.ts')) {
          for (const m of readFileSync(p, 'utf8').matchAll(/from '(@opentelemetry\/[^']+)'/g)) {
            imports.add(m[1] as string);
          }
        }
      }
    };
    walk(src);
    expect([...imports]).toEqual(['@opentelemetry/api']);
  });
});
