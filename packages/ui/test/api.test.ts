/**
 * The JSON API against real runs: a worker runs them, the UI (under a base path, through
 * node:http) reads and acts on them, and the database is checked after each action.
 */
import { Client, silentLogger } from '@cyclone/core';
import { waitFor } from '@cyclone/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createUi } from '../src/index.js';
import type {
  BulkResponse,
  HealthResponse,
  LedgerResponse,
  LookupResponse,
  MetaResponse,
  Overview,
  RetryResponse,
  RunResponse,
  RunsResponse,
  SchedulesResponse,
  StepResponse,
  ThroughputResponse,
  UnknownResponse,
  WorkflowsResponse,
} from '../src/shared/api.js';
import { BULK_CANCEL_NOTICE, RETRY_NOTICE } from '../src/shared/api.js';
import {
  Approval,
  BASE,
  BIG_OUTPUT_CHARS,
  Big,
  Charge,
  type Fixture,
  getJson,
  healed,
  Parked,
  postJson,
  startFixture,
  Tick,
} from './support/harness.js';

let f: Fixture;

beforeAll(async () => {
  f = await startFixture();
});
afterAll(async () => {
  await f?.stop();
});

/** A `charge` run that failed with `b` discarded. */
async function failedChargeRun(): Promise<string> {
  const { runId } = await f.client.submit(Charge, {});
  const run = await f.client.waitForRun(runId, { timeoutMs: 30_000 });
  expect(run.state).toBe('failed');
  return runId;
}

describe('reads', () => {
  it('meta tells the page its base path, rights and features', async () => {
    const { status, body, headers } = await getJson<MetaResponse>(f.url, '/api/meta');
    expect(status).toBe(200);
    expect(body).toMatchObject({
      basePath: BASE,
      apiBase: `${BASE}/api`,
      readOnly: false,
      user: null,
      can: { retry: true, cancel: true, signal: true, schedules: true },
      features: { ledger: true, schedules: true, signals: true },
      limits: { maxBulk: 1000, previewBytes: 65536, pageMax: 200 },
    });
    expect(headers.get('cache-control')).toBe('no-store');
  });

  it('without the ledger table (a schema migrated by core alone) the ledger is off and empty', async () => {
    const bare = new Client({
      connectionString: f.db.url,
      schema: 'bare',
      poolSize: 2,
      logger: silentLogger,
    });
    await bare.migrate();
    const ui = createUi({ client: bare, basePath: BASE, logger: silentLogger });
    try {
      const { runId } = await bare.submit(Parked, {});
      const get = async (path: string) =>
        (await ui.fetch(new Request(`http://127.0.0.1${BASE}${path}`))).json();
      expect(await get('/api/meta')).toMatchObject({ features: { ledger: false } });
      expect(await get(`/api/runs/${runId}/ledger`)).toEqual({ items: [] });
      expect(await get(`/api/runs/${runId}`)).toMatchObject({
        run: { runId, workflow: 'parked' },
        steps: [{ node: 'p', ledger: { started: 0, succeeded: 0, failed: 0, unknown: 0 } }],
      });
      expect(await get('/api/overview')).toMatchObject({ unknownOutcomes: null });
    } finally {
      await ui.close();
      await bare.close();
    }
  });

  it('a failed run: its steps, the discarded node, its error and its ledger entries', async () => {
    const runId = await failedChargeRun();
    const { body } = await getJson<RunResponse>(f.url, `/api/runs/${runId}`);
    expect(body.run).toMatchObject({ runId, workflow: 'charge', state: 'failed' });
    expect(body.run.stepsTotal).toBe(body.steps.length);
    expect(body.run.input).toEqual({ bytes: 2, truncated: false, text: '{}' });
    const byNode = Object.fromEntries(body.steps.map((s) => [s.node, s]));
    expect(byNode.a).toMatchObject({ state: 'completed', ledger: { succeeded: 1 } });
    expect(byNode.b).toMatchObject({ state: 'discarded', upstream: ['a'], downstream: ['c'] });
    expect(byNode.b?.lastError).toContain('card declined');
    expect(byNode.c?.state).toBe('pending');

    const step = await getJson<StepResponse>(f.url, `/api/runs/${runId}/steps/b`);
    expect(step.status).toBe(200);
    expect(step.body.step.errors[0]).toMatchObject({ kind: 'non_retryable', attempt: 1 });

    const ledger = await getJson<LedgerResponse>(f.url, `/api/runs/${runId}/ledger?node=a`);
    expect(ledger.body.items).toHaveLength(1);
    expect(ledger.body.items[0]).toMatchObject({
      runId,
      node: 'a',
      key: `${runId}:a`,
      provider: 'fake-pay',
      operation: 'charge',
      phase: 'succeeded',
      calls: 1,
    });
    expect(JSON.parse(ledger.body.items[0]?.result?.text ?? 'null')).toMatchObject({
      token: 'tok_live_secret',
    });
  });

  it('answers 404 with the error shape for an unknown run, node or path', async () => {
    const missing = '00000000-0000-4000-8000-000000000000';
    expect(await getJson(f.url, `/api/runs/${missing}`)).toMatchObject({
      status: 404,
      body: { error: 'run_not_found' },
    });
    expect(await getJson(f.url, '/api/runs/not-a-uuid')).toMatchObject({ status: 404 });
    const runId = await failedChargeRun();
    expect(await getJson(f.url, `/api/runs/${runId}/steps/nope`)).toMatchObject({
      status: 404,
      body: { error: 'node_not_found' },
    });
    expect(await getJson(f.url, '/api/nothing-here')).toMatchObject({
      status: 404,
      body: { error: 'not_found' },
    });
    expect(await getJson(f.url, '/api/runs?state=bogus')).toMatchObject({
      status: 400,
      body: { error: 'bad_request' },
    });
  });

  it('runs list: workflow and state filters, keyset pages older and newer without gaps or repeats', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 7; i++) ids.push((await f.client.submit(Parked, { i })).runId);
    const newestFirst = [...ids].reverse();

    const seen: string[] = [];
    const pages: RunsResponse[] = [];
    let cursor: string | null = null;
    do {
      const q: string = `/api/runs?workflow=parked&limit=3${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`;
      const { status, body } = await getJson<RunsResponse>(f.url, q);
      expect(status).toBe(200);
      pages.push(body);
      seen.push(...body.items.map((r) => r.runId));
      cursor = body.next;
    } while (cursor);
    expect(pages.map((p) => p.items.length)).toEqual([3, 3, 1]);
    expect(seen).toEqual(newestFirst);
    expect(pages[0]?.prev).toBeNull();

    // Back from the last page to the newer ones.
    const back = await getJson<RunsResponse>(
      f.url,
      `/api/runs?workflow=parked&limit=3&dir=newer&cursor=${encodeURIComponent(pages[2]?.prev ?? '')}`,
    );
    expect(back.body.items.map((r) => r.runId)).toEqual(newestFirst.slice(3, 6));

    // A time range on createdAt: from the fourth newest on.
    const fourth = pages[1]?.items[0];
    const since = await getJson<RunsResponse>(
      f.url,
      `/api/runs?workflow=parked&from=${encodeURIComponent(fourth?.createdAt ?? '')}`,
    );
    const sinceIds = since.body.items.map((r) => r.runId);
    // The four newest at least (an older run of the same millisecond may join them).
    expect(sinceIds.slice(0, 4)).toEqual(newestFirst.slice(0, 4));
    const before = await getJson<RunsResponse>(
      f.url,
      `/api/runs?workflow=parked&to=${encodeURIComponent(fourth?.createdAt ?? '')}`,
    );
    const beforeIds = before.body.items.map((r) => r.runId);
    // The two ranges split the runs: none in both, none in neither.
    expect([...sinceIds, ...beforeIds]).toEqual(newestFirst);

    const failed = await failedChargeRun();
    const onlyFailed = await getJson<RunsResponse>(f.url, '/api/runs?state=failed&workflow=charge');
    expect(onlyFailed.body.items.map((r) => r.runId)).toContain(failed);
    expect(
      onlyFailed.body.items.every((r) => r.state === 'failed' && r.workflow === 'charge'),
    ).toBe(true);
    const running = await getJson<RunsResponse>(f.url, '/api/runs?state=running&workflow=charge');
    expect(running.body.items.map((r) => r.runId)).not.toContain(failed);
  });

  it('lookup by run id, by submit key, by workflow:key and by idempotency key', async () => {
    const { runId } = await f.client.submitOnce(Parked, 'order-42', { order: 42 });
    expect((await getJson<LookupResponse>(f.url, `/api/lookup?q=${runId}`)).body.items).toEqual([
      { kind: 'run', runId, workflow: 'parked' },
    ]);
    expect((await getJson<LookupResponse>(f.url, '/api/lookup?q=order-42')).body.items).toEqual([
      { kind: 'submitKey', runId, workflow: 'parked' },
    ]);
    expect(
      (await getJson<LookupResponse>(f.url, '/api/lookup?q=parked%3Aorder-42')).body.items,
    ).toEqual([{ kind: 'submitKey', runId, workflow: 'parked' }]);

    const charged = await failedChargeRun();
    expect(
      (await getJson<LookupResponse>(f.url, `/api/lookup?q=${encodeURIComponent(`${charged}:a`)}`))
        .body.items,
    ).toEqual([{ kind: 'idempotencyKey', runId: charged, node: 'a' }]);

    expect(await getJson(f.url, '/api/lookup?q=no-such-key')).toMatchObject({
      status: 404,
      body: { error: 'not_found' },
    });
  });

  it('a 5 MB output comes as a 64 KiB preview; the download has all of it', async () => {
    const { runId } = await f.client.submit(Big, {});
    expect((await f.client.waitForRun(runId, { timeoutMs: 30_000 })).state).toBe('completed');
    const fullBytes = BIG_OUTPUT_CHARS + '{"blob": ""}'.length;

    const res = await fetch(`${f.url}/api/runs/${runId}/steps/blob`);
    const raw = await res.text();
    expect(raw.length).toBeLessThan(100_000);
    const { step } = JSON.parse(raw) as StepResponse;
    expect(step.output).toMatchObject({ truncated: true, bytes: fullBytes });
    expect(Buffer.byteLength(step.output?.text ?? '')).toBeLessThanOrEqual(65536);
    expect(step.output?.text.startsWith('{"blob": "xxx')).toBe(true);

    const download = await fetch(`${f.url}/api/runs/${runId}/steps/blob/output`);
    expect(download.status).toBe(200);
    expect(download.headers.get('content-disposition')).toMatch(
      /^attachment; filename=".*blob-output\.json"$/,
    );
    const whole = await download.text();
    expect(Buffer.byteLength(whole)).toBe(fullBytes);
    expect((JSON.parse(whole) as { blob: string }).blob).toHaveLength(BIG_OUTPUT_CHARS);
  });
});

describe('actions', () => {
  it('retry of a discarded node through the API, after which the run completes; the ledger call is not repeated', async () => {
    const runId = await failedChargeRun();
    healed.add(runId);
    const { status, body } = await postJson<RetryResponse>(
      f.origin,
      f.url,
      `/api/runs/${runId}/retry`,
      { node: 'b' },
    );
    expect(status).toBe(200);
    expect(body).toEqual({ runId, reopened: ['b'], notice: RETRY_NOTICE });
    const run = await f.client.waitForRun(runId, { timeoutMs: 30_000 });
    expect(run.state).toBe('completed');
    const { rows } = await f.db.pool.query(
      'SELECT calls FROM cyclone.cyclone_idempotency WHERE run_id = $1',
      [runId],
    );
    expect(rows).toEqual([{ calls: 1 }]);
  });

  it('retry of a node that is not discarded is 409 invalid_state; retry all reopens every discarded node', async () => {
    const runId = await failedChargeRun();
    expect(
      await postJson(f.origin, f.url, `/api/runs/${runId}/retry`, { node: 'a' }),
    ).toMatchObject({ status: 409, body: { error: 'invalid_state' } });
    healed.add(runId);
    const all = await postJson<RetryResponse>(f.origin, f.url, `/api/runs/${runId}/retry`, {
      all: true,
    });
    expect(all.body.reopened).toEqual(['b']);
    expect((await f.client.waitForRun(runId, { timeoutMs: 30_000 })).state).toBe('completed');
  });

  it('cancel: the run and its unfinished steps are cancelled; cancelling a completed run is 409', async () => {
    const { runId } = await f.client.submit(Parked, {});
    const { status, body } = await postJson(f.origin, f.url, `/api/runs/${runId}/cancel`, {});
    expect(status).toBe(200);
    // Its own notice, not the retry's sentence about provider calls.
    expect(body).toMatchObject({
      runId,
      cancelled: true,
      notice: `Run ${runId} cancelled: its unfinished nodes are cancelled, and running handlers are told to stop.`,
    });
    const run = await f.client.getRun(runId);
    expect(run.state).toBe('cancelled');
    expect(run.steps.map((s) => s.state)).toEqual(['cancelled']);

    const done = await f.client.submit(Big, {});
    await f.client.waitForRun(done.runId, { timeoutMs: 30_000 });
    expect(await postJson(f.origin, f.url, `/api/runs/${done.runId}/cancel`, {})).toMatchObject({
      status: 409,
      body: { error: 'invalid_state' },
    });
  });

  it('bulk retry over a filter, capped per call, goes on with `next` until every run completes', async () => {
    const ids = await Promise.all([failedChargeRun(), failedChargeRun(), failedChargeRun()]);
    // Earlier tests' failed charge runs stay failed: heal them too, so the filter matches all.
    const before = await f.db.pool.query<{ id: string }>(
      "SELECT id FROM cyclone.cyclone_runs WHERE workflow = 'charge' AND state = 'failed'",
    );
    for (const r of before.rows) healed.add(r.id);
    const matching = before.rows.length;
    expect(matching).toBeGreaterThanOrEqual(3);

    const capped = await f.serve({ maxBulk: 2 });
    const filter = { workflow: 'charge', state: 'failed' };
    let cursor: string | undefined;
    let calls = 0;
    const total = { processed: 0, changed: 0, skipped: 0, failed: 0 };
    do {
      const { status, body } = await postJson<BulkResponse>(
        capped.origin,
        capped.url,
        '/api/runs/bulk',
        { action: 'retryAll', filter, expect: matching, ...(cursor ? { cursor } : {}) },
      );
      expect(status).toBe(200);
      expect(body.processed).toBeLessThanOrEqual(2);
      expect(body.notice).toBe(RETRY_NOTICE);
      total.processed += body.processed;
      total.changed += body.changed;
      total.skipped += body.skipped;
      total.failed += body.failed.length;
      cursor = body.next ?? undefined;
      calls++;
    } while (cursor && calls < 50);
    expect(total).toEqual({ processed: matching, changed: matching, skipped: 0, failed: 0 });
    expect(calls).toBe(Math.ceil(matching / 2));
    for (const id of ids) {
      expect((await f.client.waitForRun(id, { timeoutMs: 30_000 })).state).toBe('completed');
    }
  });

  it('bulk cancel over ids skips runs already finished', async () => {
    const a = await f.client.submit(Parked, {});
    const b = await f.client.submit(Parked, {});
    const done = await f.client.submit(Big, {});
    await f.client.waitForRun(done.runId, { timeoutMs: 30_000 });
    const { body } = await postJson<BulkResponse>(f.origin, f.url, '/api/runs/bulk', {
      action: 'cancel',
      ids: [a.runId, b.runId, done.runId],
    });
    expect(body).toMatchObject({ processed: 3, changed: 2, skipped: 1, failed: [], next: null });
    expect(body.notice).toBe(BULK_CANCEL_NOTICE);
    expect((await f.client.getRun(a.runId)).state).toBe('cancelled');
    expect((await f.client.getRun(b.runId)).state).toBe('cancelled');
    expect((await f.client.getRun(done.runId)).state).toBe('completed');
  });

  it('a bulk call over a filter that now matches far more than confirmed is refused', async () => {
    for (let i = 0; i < 5; i++) await f.client.submit(Parked, { drift: i });
    expect(
      await postJson(f.origin, f.url, '/api/runs/bulk', {
        action: 'cancel',
        filter: { workflow: 'parked', state: 'running' },
        expect: 1,
      }),
    ).toMatchObject({ status: 409, body: { error: 'invalid_state' } });
  });
});

describe('overview, health, workflows, throughput, unknown outcomes', () => {
  it('answer from the reader, with the ledger’s unknown outcomes counted and listed', async () => {
    const runId = await failedChargeRun();
    // An unknown outcome, as once() leaves one when a provider's answer was lost.
    await f.db.pool.query(
      "UPDATE cyclone.cyclone_idempotency SET phase = 'unknown', result = NULL WHERE run_id = $1",
      [runId],
    );
    const overview = await getJson<Overview>(f.url, '/api/overview');
    expect(overview.status).toBe(200);
    expect(overview.body.runs.failed.count).toBeGreaterThanOrEqual(1);
    expect(overview.body.recentFailed.map((r) => r.runId)).toContain(runId);
    expect(overview.body.unknownOutcomes?.count).toBeGreaterThanOrEqual(1);

    const unknown = await getJson<UnknownResponse>(f.url, '/api/unknown');
    expect(unknown.body.items.find((e) => e.runId === runId)).toMatchObject({
      node: 'a',
      phase: 'unknown',
      provider: 'fake-pay',
    });
    expect(await getJson(f.url, '/api/unknown?cursor=bogus')).toMatchObject({ status: 400 });

    const workflows = await getJson<WorkflowsResponse>(f.url, '/api/workflows');
    expect(workflows.body.items.map((w) => w.workflow)).toContain('charge');

    const health = await getJson<HealthResponse>(f.url, '/api/health/workers');
    expect(health.body.workers.find((w) => w.workerId === f.worker.workerId)).toMatchObject({
      alive: true,
      workflows: expect.arrayContaining(['charge', 'big']),
    });

    const chart = await getJson<ThroughputResponse>(f.url, '/api/stats/throughput?window=1h');
    expect(chart.body).toMatchObject({ window: '1h', bucketMs: 60_000 });
    expect(chart.body.points.length).toBeGreaterThanOrEqual(60);
    expect(await getJson(f.url, '/api/stats/throughput?window=2y')).toMatchObject({
      status: 400,
      body: { error: 'bad_request' },
    });
  });
});

describe('signals and schedules', () => {
  it('a signal through the API completes the wait node; the second of a name is not accepted', async () => {
    const { runId } = await f.client.submit(Approval, {});
    const sent = await postJson(f.origin, f.url, `/api/runs/${runId}/signal`, {
      name: 'approved',
      payload: { by: 'ada' },
    });
    expect(sent).toMatchObject({
      status: 200,
      body: {
        runId,
        name: 'approved',
        accepted: true,
        waitingNodes: ['approve'],
        notice: `Signal “approved” sent to run ${runId}: node approve completes with its payload.`,
      },
    });
    const run = await f.client.waitForRun(runId, { timeoutMs: 30_000 });
    expect(run.state).toBe('completed');
    expect(run.steps.find((s) => s.node === 'approve')?.output).toEqual({ by: 'ada' });
    expect(
      await postJson(f.origin, f.url, `/api/runs/${runId}/signal`, { name: 'approved' }),
    ).toMatchObject({ status: 409, body: { error: 'invalid_state' } });
  });

  it('a signal no node waits for is stored, and its notice says so', async () => {
    const { runId } = await f.client.submit(Approval, {});
    const sent = await postJson(f.origin, f.url, `/api/runs/${runId}/signal`, { name: 'approvd' });
    expect(sent).toMatchObject({
      status: 200,
      body: {
        accepted: true,
        waitingNodes: [],
        notice: `Signal “approvd” sent to run ${runId}. No node of this run waits for “approvd” (a misspelt name, or its wait node has finished); it is stored anyway.`,
      },
    });
    await f.client.cancel(runId);
  });

  it('schedules: listed, paused, resumed and triggered through the API', async () => {
    const listed = await getJson<SchedulesResponse>(f.url, '/api/schedules');
    expect(listed.body.items.find((s) => s.name === 'nightly')).toMatchObject({
      workflow: 'tick',
      paused: false,
      carried: true,
    });
    const paused = await postJson(f.origin, f.url, '/api/schedules/nightly/pause', {});
    expect(paused).toMatchObject({
      status: 200,
      body: { name: 'nightly', action: 'pause', notice: 'Schedule “nightly” paused.' },
    });
    expect((await f.client.listSchedules()).find((s) => s.name === 'nightly')?.paused).toBe(true);
    await postJson(f.origin, f.url, '/api/schedules/nightly/resume', {});
    expect((await f.client.listSchedules()).find((s) => s.name === 'nightly')?.paused).toBe(false);

    expect(await postJson(f.origin, f.url, '/api/schedules/nightly/trigger', {})).toMatchObject({
      status: 200,
      body: { name: 'nightly', action: 'trigger', notice: 'Schedule “nightly” triggered.' },
    });
    const made = await waitFor('the triggered run', async () => {
      const runs = await f.client.listRuns({ workflow: Tick.name });
      return runs.find((r) => r.submitKey?.startsWith('schedule:nightly:trigger:'));
    });
    expect((await f.client.waitForRun(made.runId, { timeoutMs: 30_000 })).state).toBe('completed');

    expect(await postJson(f.origin, f.url, '/api/schedules/nope/pause', {})).toMatchObject({
      status: 404,
      body: { error: 'schedule_not_found' },
    });
  });
});

describe('limits', () => {
  it('lists the limits the workers recorded, and says the feature is there', async () => {
    const meta = await getJson<MetaResponse>(f.url, '/api/meta');
    expect(meta.body.features.limits).toBe(true);
    const { status, body } = await getJson<{ items: Record<string, unknown>[] }>(
      f.url,
      '/api/limits',
    );
    expect(status).toBe(200);
    expect(body.items).toContainEqual(
      expect.objectContaining({ action: 'throttled', kind: 'concurrency', key: null, limit: 2 }),
    );
  });
});
