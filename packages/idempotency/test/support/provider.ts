/**
 * A loopback fake provider (a `LoopbackHttpServer` on 127.0.0.1, port 0; PROVIDERS.md § 5):
 * `POST /effects` performs an "effect" (a charge, an email) and counts it; `GET /effects?key=`
 * lists the effects carrying a key (for reconcile functions). It records every request and has
 * a programmable fault injector. With `dedupe`, it honours `Idempotency-Key` like Stripe: a
 * known key replays the stored response without a new effect, a different body under a known key
 * is a 400 `idempotency_error`, a key still in flight is a 409.
 */
import { randomBytes } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { LoopbackHttpServer } from '../../src/testing/index.js';

/** What the next `POST /effects` meets (taken from the queue in order; default `ok`). */
export type Fault =
  /** Perform the effect and answer 200. */
  | 'ok'
  /** Perform the effect, then destroy the socket: the lost response. */
  | 'drop'
  /** Wait for `release()`, then perform the effect and answer: a call in flight. */
  | 'hold'
  /** Answer this status without an effect, with these response headers. */
  | { status: number; code?: string; headers?: Record<string, string> };

/** One performed effect. */
export interface Effect {
  id: string;
  key: string | null;
  body: unknown;
}

/** One `POST /effects` as received. */
export interface Received {
  key: string | null;
  body: unknown;
  fault: string;
  /** Answered from the dedupe store, without an effect. */
  replayed: boolean;
  /** When it arrived (this process's clock). */
  at: Date;
}

export class FakeProvider {
  readonly received: Received[] = [];
  readonly effects: Effect[] = [];
  lookups = 0;
  private readonly faults: Fault[] = [];
  private readonly held: (() => void)[] = [];
  private readonly store = new Map<
    string,
    { body: string; status: number; response: unknown } | 'in_flight'
  >();
  private readonly server = new LoopbackHttpServer((req, res) => this.handle(req, res), {
    onError: (err, res) => {
      res.statusCode = 500;
      res.end(String(err));
    },
  });

  private constructor(readonly dedupe: boolean) {}

  /** Starts a fake on 127.0.0.1, port 0. */
  static async start(options: { dedupe?: boolean } = {}): Promise<FakeProvider> {
    const p = new FakeProvider(options.dedupe ?? false);
    await p.server.listen(0);
    return p;
  }

  /** `http://127.0.0.1:PORT`. */
  get url(): string {
    return this.server.origin;
  }

  /** Queues faults for the next requests, in order. */
  inject(...faults: Fault[]): void {
    this.faults.push(...faults);
  }

  /** Requests waiting in a `hold` fault. */
  get holding(): number {
    return this.held.length;
  }

  /** Lets every held request go on (perform the effect and answer). */
  release(): void {
    for (const go of this.held.splice(0)) go();
  }

  /** Effects carrying `key`. */
  effectsFor(key: string): Effect[] {
    return this.effects.filter((e) => e.key === key);
  }

  async close(): Promise<void> {
    this.release();
    await this.server.close();
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://x');
    if (req.method === 'GET' && url.pathname === '/effects') {
      this.lookups++;
      const key = url.searchParams.get('key');
      return json(res, 200, { data: this.effects.filter((e) => e.key === key) });
    }
    if (req.method !== 'POST' || url.pathname !== '/effects') return json(res, 404, {});
    let text = '';
    for await (const chunk of req) text += chunk;
    const body = text ? JSON.parse(text) : null;
    const key = (req.headers['idempotency-key'] as string | undefined) ?? null;
    const fault = this.faults.shift() ?? 'ok';
    const rec: Received = {
      key,
      body,
      fault: typeof fault === 'string' ? fault : `status ${fault.status}`,
      replayed: false,
      at: new Date(),
    };
    this.received.push(rec);

    if (this.dedupe && key) {
      const seen = this.store.get(key);
      if (seen === 'in_flight') {
        return json(res, 409, {
          error: { type: 'invalid_request_error', code: 'idempotency_key_in_use' },
        });
      }
      if (seen) {
        if (seen.body !== text) {
          return json(res, 400, { error: { type: 'idempotency_error', message: 'mismatch' } });
        }
        rec.replayed = true;
        res.setHeader('idempotent-replayed', 'true');
        return json(res, seen.status, seen.response);
      }
    }
    if (typeof fault === 'object') {
      for (const [name, value] of Object.entries(fault.headers ?? {})) res.setHeader(name, value);
      return json(res, fault.status, { error: { code: fault.code ?? `http_${fault.status}` } });
    }
    if (this.dedupe && key) this.store.set(key, 'in_flight');
    if (fault === 'hold') await new Promise<void>((r) => this.held.push(r));
    const effect: Effect = { id: `eff_${randomBytes(6).toString('hex')}`, key, body };
    this.effects.push(effect);
    const response = { id: effect.id, key, request: body };
    if (this.dedupe && key) this.store.set(key, { body: text, status: 200, response });
    if (fault === 'drop') {
      req.socket.destroy();
      return;
    }
    return json(res, 200, response);
  }
}

function json(res: ServerResponse, status: number, body: unknown): void {
  res.statusCode = status;
  res.setHeader('content-type', 'application/json');
  res.end(JSON.stringify(body));
}

/** A non-2xx answer of the fake, with its status and headers (so `classifyError` sees them). */
export class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly body: unknown,
    readonly headers?: Headers,
  ) {
    super(`provider answered HTTP ${status}: ${JSON.stringify(body)}`);
    this.name = 'HttpError';
  }
}

/** The fake's success response. */
export interface EffectResponse {
  id: string;
  key: string | null;
  request: unknown;
}

/** `POST /effects` with the key in `Idempotency-Key`, the way an SDK would send it. */
export async function postEffect(
  baseUrl: string,
  key: string,
  body: unknown,
  signal?: AbortSignal,
): Promise<EffectResponse> {
  const res = await fetch(`${baseUrl}/effects`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': key },
    body: JSON.stringify(body),
    ...(signal ? { signal } : {}),
  });
  const data = (await res.json()) as unknown;
  if (!res.ok) throw new HttpError(res.status, data, res.headers);
  return data as EffectResponse;
}

/** `GET /effects?key=`: the effects carrying `key` (a reconcile lookup). */
export async function findEffects(baseUrl: string, key: string): Promise<EffectResponse[]> {
  const res = await fetch(`${baseUrl}/effects?key=${encodeURIComponent(key)}`);
  const data = (await res.json()) as { data: { id: string; key: string; body: unknown }[] };
  return data.data.map((e) => ({ id: e.id, key: e.key, request: e.body }));
}
