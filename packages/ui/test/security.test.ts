/**
 * The server's defences without a browser: read-only mode, the authorize hook (401 with a
 * challenge, 403, per-action rights), the CSRF check (content type, custom header, Origin,
 * Sec-Fetch-Site), the redact hook on every payload, and the response headers.
 */

import { silentLogger } from '@cyclone/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type AuditEvent, basicAuth, bearerToken } from '../src/index.js';
import type { LedgerResponse, MetaResponse, RunResponse, StepResponse } from '../src/shared/api.js';
import { UI_HEADER } from '../src/shared/api.js';
import {
  actionHeaders,
  Charge,
  type Fixture,
  getJson,
  Parked,
  postJson,
  startFixture,
} from './support/harness.js';

let f: Fixture;
let failedRun: string;

beforeAll(async () => {
  f = await startFixture();
  const { runId } = await f.client.submit(Charge, { card: '4242424242424242', name: 'Ada' });
  expect((await f.client.waitForRun(runId, { timeoutMs: 30_000 })).state).toBe('failed');
  failedRun = runId;
});
afterAll(async () => {
  await f?.stop();
});

const basic = (user: string, password: string) =>
  `Basic ${Buffer.from(`${user}:${password}`).toString('base64')}`;

describe('read-only', () => {
  it('refuses every forged action with 403 before acting, and tells the page it is read-only', async () => {
    const ro = await f.serve({ readOnly: true });
    const meta = await getJson<MetaResponse>(ro.url, '/api/meta');
    expect(meta.body).toMatchObject({
      readOnly: true,
      can: { retry: false, cancel: false, signal: false, schedules: false },
    });
    const { runId } = await f.client.submit(Parked, {});
    for (const [path, body] of [
      [`/api/runs/${runId}/cancel`, {}],
      [`/api/runs/${failedRun}/retry`, { node: 'b' }],
      ['/api/runs/bulk', { action: 'cancel', ids: [runId] }],
      [`/api/runs/${runId}/signal`, { name: 'go' }],
      ['/api/schedules/nightly/pause', {}],
    ] as const) {
      expect(await postJson(ro.origin, ro.url, path, body)).toMatchObject({
        status: 403,
        body: { error: 'read_only' },
      });
    }
    // Whatever the method.
    const del = await fetch(`${ro.url}/api/runs/${runId}`, {
      method: 'DELETE',
      headers: actionHeaders(ro.origin),
    });
    expect(del.status).toBe(403);
    expect((await f.client.getRun(runId)).state).toBe('running');
    expect((await f.client.getRun(failedRun)).state).toBe('failed');
  });
});

describe('authorize', () => {
  it('basicAuth: 401 with a Basic challenge without credentials, 200 with them; health stays open', async () => {
    const a = await f.serve({ authorize: basicAuth('ops', 'hunter2') });
    for (const path of ['/api/meta', '/', '/runs/x', '/api/runs']) {
      const res = await fetch(`${a.url}${path}`);
      expect(res.status, path).toBe(401);
      expect(res.headers.get('www-authenticate')).toBe('Basic realm="Cyclone", charset="UTF-8"');
    }
    const wrong = await getJson(a.url, '/api/meta', { authorization: basic('ops', 'nope') });
    expect(wrong).toMatchObject({ status: 401, body: { error: 'unauthorized' } });
    const ok = await getJson<MetaResponse>(a.url, '/api/meta', {
      authorization: basic('ops', 'hunter2'),
    });
    expect(ok.status).toBe(200);
    expect(ok.body.user).toBe('ops');
    expect((await fetch(`${a.url}/api/health/live`)).status).toBe(200);
    expect((await fetch(`${a.url}/api/health/ready`)).status).toBe(200);
    // An action with credentials and the page's headers goes through.
    const { runId } = await f.client.submit(Parked, {});
    expect(
      await postJson(
        a.origin,
        a.url,
        `/api/runs/${runId}/cancel`,
        {},
        {
          authorization: basic('ops', 'hunter2'),
        },
      ),
    ).toMatchObject({ status: 200 });
    // Without them, refused and nothing changed.
    const other = await f.client.submit(Parked, {});
    expect(await postJson(a.origin, a.url, `/api/runs/${other.runId}/cancel`, {})).toMatchObject({
      status: 401,
    });
    expect((await f.client.getRun(other.runId)).state).toBe('running');
  });

  it('a hook that refuses with 403, and bearerToken', async () => {
    const denied = await f.serve({
      authorize: () => ({ refuse: 403, message: 'not on the ops rota' }),
    });
    expect(await getJson(denied.url, '/api/overview')).toMatchObject({
      status: 403,
      body: { error: 'forbidden', message: 'not on the ops rota' },
    });
    const token = await f.serve({ authorize: bearerToken('t0ken', { user: 'proxy' }) });
    const res = await fetch(`${token.url}/api/meta`);
    expect(res.status).toBe(401);
    expect(res.headers.get('www-authenticate')).toBe('Bearer realm="Cyclone"');
    expect(
      await getJson<MetaResponse>(token.url, '/api/meta', { authorization: 'Bearer t0ken' }),
    ).toMatchObject({ status: 200, body: { user: 'proxy' } });
  });

  it('per-action rights: a user who may retry but not cancel gets 403 on cancel', async () => {
    const limited = await f.serve({
      authorize: () => ({ user: 'viewer', can: { retry: true } }),
    });
    const meta = await getJson<MetaResponse>(limited.url, '/api/meta');
    expect(meta.body.can).toEqual({ retry: true, cancel: false, signal: false, schedules: false });
    const { runId } = await f.client.submit(Parked, {});
    expect(
      await postJson(limited.origin, limited.url, `/api/runs/${runId}/cancel`, {}),
    ).toMatchObject({ status: 403, body: { error: 'forbidden' } });
    expect(
      await postJson(limited.origin, limited.url, '/api/runs/bulk', {
        action: 'cancel',
        ids: [runId],
      }),
    ).toMatchObject({ status: 403, body: { error: 'forbidden' } });
    expect((await f.client.getRun(runId)).state).toBe('running');
  });
});

describe('audit', () => {
  it('every action reaches the logger and onAction with its user, refused ones with their error', async () => {
    const events: AuditEvent[] = [];
    const lines: { obj: object; msg?: string }[] = [];
    const logger = {
      ...silentLogger,
      info: (obj: object, msg?: string) => void lines.push({ obj, msg }),
    };
    const a = await f.serve({
      authorize: () => ({ user: 'ada' }),
      onAction: (e) => void events.push(e),
      logger,
    });
    const { runId } = await f.client.submit(Parked, {});
    await postJson(a.origin, a.url, `/api/runs/${runId}/cancel`, {});
    await postJson(a.origin, a.url, `/api/runs/${failedRun}/retry`, { node: 'a' });
    expect(events).toEqual([
      expect.objectContaining({ user: 'ada', action: 'cancel', runId }),
      expect.objectContaining({
        user: 'ada',
        action: 'retry',
        runId: failedRun,
        node: 'a',
        error: 'invalid_state',
      }),
    ]);
    expect(lines.map((l) => l.msg)).toEqual([
      'cyclone-ui audit: cancel',
      'cyclone-ui audit: retry refused',
    ]);
    expect(lines[0]?.obj).toMatchObject({ user: 'ada', runId });
  });
});

describe('CSRF', () => {
  async function forged(headers: Record<string, string>, body = '{}') {
    const { runId } = await f.client.submit(Parked, {});
    const res = await fetch(`${f.url}/api/runs/${runId}/cancel`, {
      method: 'POST',
      headers,
      body,
    });
    const state = (await f.client.getRun(runId)).state;
    return { status: res.status, body: await res.json(), state };
  }

  it('refuses a cross-origin POST (Origin of another site, or Sec-Fetch-Site cross-site)', async () => {
    expect(
      await forged({ ...actionHeaders(f.origin), origin: 'https://evil.example' }),
    ).toMatchObject({ status: 403, body: { error: 'csrf' }, state: 'running' });
    expect(
      await forged({ ...actionHeaders(f.origin), 'sec-fetch-site': 'cross-site' }),
    ).toMatchObject({ status: 403, body: { error: 'csrf' }, state: 'running' });
    expect(await forged({ ...actionHeaders(f.origin), origin: 'null' })).toMatchObject({
      status: 403,
      state: 'running',
    });
  });

  it('refuses a POST without the custom header, and a form-encoded one', async () => {
    const { [UI_HEADER]: _, ...noHeader } = actionHeaders(f.origin);
    expect(await forged(noHeader)).toMatchObject({
      status: 403,
      body: { error: 'csrf' },
      state: 'running',
    });
    expect(
      await forged(
        { ...actionHeaders(f.origin), 'content-type': 'application/x-www-form-urlencoded' },
        'a=1',
      ),
    ).toMatchObject({ status: 415, body: { error: 'unsupported_media_type' }, state: 'running' });
    expect(
      await forged({ ...actionHeaders(f.origin), 'content-type': 'text/plain' }),
    ).toMatchObject({ status: 415, state: 'running' });
  });

  it('accepts a trusted origin, and a request without Origin (not a browser)', async () => {
    const proxied = await f.serve({ trustedOrigins: ['https://ops.example.com'] });
    const { runId } = await f.client.submit(Parked, {});
    expect(
      await postJson(
        proxied.origin,
        proxied.url,
        `/api/runs/${runId}/cancel`,
        {},
        {
          origin: 'https://ops.example.com',
        },
      ),
    ).toMatchObject({ status: 200 });
    const { origin: _o, 'sec-fetch-site': _s, ...script } = actionHeaders(f.origin);
    const other = await f.client.submit(Parked, {});
    const res = await fetch(`${f.url}/api/runs/${other.runId}/cancel`, {
      method: 'POST',
      headers: script,
      body: '{}',
    });
    expect(res.status).toBe(200);
  });
});

describe('redact', () => {
  it('applies the hook to input, output, errors (message and last error) and ledger bodies, downloads included', async () => {
    const seen = new Set<string>();
    const r = await f.serve({
      redact: (value, target) => {
        seen.add(target.kind);
        const text = JSON.stringify(value)
          .replace(/4242424242424242/g, '****')
          .replace(/tok_live_secret/g, '[token]')
          .replace(/ada@example\.com/g, '[email]');
        return JSON.parse(text);
      },
    });
    const run = await getJson<RunResponse>(r.url, `/api/runs/${failedRun}`);
    expect(run.body.run.input?.text).toBe('{"card":"****","name":"Ada"}');
    const b = run.body.steps.find((s) => s.node === 'b');
    expect(b?.lastError).toBe('card declined for [email]');

    const stepB = await getJson<StepResponse>(r.url, `/api/runs/${failedRun}/steps/b`);
    expect(stepB.body.step.errors[0]?.message).toBe('card declined for [email]');
    expect(JSON.stringify(stepB.body)).not.toContain('ada@example.com');

    const stepA = await getJson<StepResponse>(r.url, `/api/runs/${failedRun}/steps/a`);
    expect(stepA.body.step.output?.text).toContain('[token]');
    const ledger = await getJson<LedgerResponse>(r.url, `/api/runs/${failedRun}/ledger`);
    expect(ledger.body.items[0]?.result?.text).toContain('[token]');

    for (const path of [
      `/api/runs/${failedRun}/steps/a/output`,
      `/api/runs/${failedRun}/input?raw=1`,
    ]) {
      const text = await (await fetch(`${r.url}${path}`)).text();
      expect(text).not.toMatch(/tok_live_secret|4242424242424242/);
    }
    expect([...seen].sort()).toEqual(['error', 'input', 'ledgerResult', 'output']);

    // Without the hook the same answers carry the values (the test above can fail).
    const plain = await getJson<StepResponse>(f.url, `/api/runs/${failedRun}/steps/a`);
    expect(plain.body.step.output?.text).toContain('tok_live_secret');
  });

  it('a hook that returns undefined hides the value', async () => {
    const r = await f.serve({ redact: (value, t) => (t.kind === 'input' ? undefined : value) });
    const run = await getJson<RunResponse>(r.url, `/api/runs/${failedRun}`);
    expect(run.body.run.input).toEqual({ bytes: 0, truncated: false, text: '', hidden: true });
  });
});

describe('headers and pages', () => {
  it('sends the CSP and the other security headers; robots.txt disallows all', async () => {
    const res = await fetch(`${f.url}/api/meta`);
    const csp = res.headers.get('content-security-policy') ?? '';
    expect(csp).toContain("default-src 'self'");
    expect(csp).toContain("script-src 'self'");
    expect(csp).toContain("frame-ancestors 'none'");
    expect(res.headers.get('x-frame-options')).toBe('DENY');
    expect(res.headers.get('x-content-type-options')).toBe('nosniff');
    expect(res.headers.get('referrer-policy')).toBe('no-referrer');
    expect(await (await fetch(`${f.url}/robots.txt`)).text()).toBe('User-agent: *\nDisallow: /\n');
  });
});
