/**
 * The load generator: N orders over HTTP, as clients would send them. Most carry an
 * `Idempotency-Key` (a UUID per order), some rely on the order id. A share of them is sent
 * twice the way a client does after a timeout: the first request is abandoned after a few
 * milliseconds (the server may or may not have accepted it), then the same request is sent
 * again. Every answer for an order must name the same run.
 */
import { randomUUID } from 'node:crypto';
import { SKUS } from '../schema.js';

export interface LoadOptions {
  apiUrl: string;
  orders: number;
  /** Share of orders re-sent after a client timeout. */
  resend: number;
  concurrency: number;
  /** Prefix of this batch's order ids. */
  prefix: string;
  /** Called after each accepted order, with the number accepted so far. */
  onAccepted?: (accepted: number, orderId: string, runId: string) => void;
}

export interface LoadResult {
  /** HTTP requests sent (first sends, re-sends, retries). */
  requests: number;
  /** Order id → run id of the accepted orders. */
  accepted: Map<string, string>;
  /** Orders sent twice (after an abandoned first request). */
  resent: number;
  /** First requests abandoned by the client's timeout before the answer came. */
  abandoned: number;
  /** Re-sent orders whose every answer named the same run. */
  resentSameRun: number;
  /** Problems: a refused order, answers naming different runs. */
  errors: string[];
}

interface Order {
  orderId: string;
  body: Record<string, unknown>;
  key: string | undefined;
  resend: boolean;
}

/** Builds order `i` of the batch: deterministic, except its Idempotency-Key (a fresh UUID). */
function makeOrder(prefix: string, i: number, resendEvery: number): Order {
  const orderId = `${prefix}-${String(i).padStart(5, '0')}`;
  return {
    orderId,
    body: {
      orderId,
      sku: SKUS[i % SKUS.length],
      quantity: 1 + (i % 3),
      email: `customer${i}@example.com`,
      phone: `+1555${String(1_000_000 + i).slice(-7)}`,
    },
    // Three clients in four send a key; the fourth relies on the order id.
    key: i % 4 === 3 ? undefined : randomUUID(),
    resend: resendEvery > 0 && i % resendEvery === 0,
  };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Sends every order, `concurrency` at a time; resolves when all have an answer. */
export async function runLoad(o: LoadOptions): Promise<LoadResult> {
  const result: LoadResult = {
    requests: 0,
    accepted: new Map(),
    resent: 0,
    abandoned: 0,
    resentSameRun: 0,
    errors: [],
  };
  // Every k-th order is re-sent, k chosen so that the share is `resend`.
  const resendEvery = o.resend > 0 ? Math.max(1, Math.round(1 / o.resend)) : 0;

  /** One POST; `timeoutMs` is the client's patience. Returns the answer, or 'timeout'. */
  const post = async (order: Order, timeoutMs: number) => {
    result.requests++;
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    if (order.key) headers['idempotency-key'] = order.key;
    try {
      const res = await fetch(`${o.apiUrl}/orders`, {
        method: 'POST',
        headers,
        body: JSON.stringify(order.body),
        signal: AbortSignal.timeout(timeoutMs),
      });
      return { status: res.status, body: (await res.json()) as Record<string, unknown> };
    } catch (err) {
      if ((err as Error).name === 'TimeoutError') return 'timeout' as const;
      return { status: 0, body: { error: String(err) } };
    }
  };

  /** Sends until an answer that is not a server or network error (5 tries). */
  const send = async (order: Order) => {
    for (let i = 0; ; i++) {
      const r = await post(order, 15_000);
      if (r !== 'timeout' && r.status > 0 && r.status < 500) return r;
      if (i >= 4) return r;
      await sleep(200 * 2 ** i);
    }
  };

  const one = async (order: Order) => {
    const runIds = new Set<string>();
    if (order.resend) {
      result.resent++;
      // A client that gives up after a few milliseconds, then tries again.
      const first = await post(order, 2 + Math.floor(Math.random() * 25));
      if (first === 'timeout') result.abandoned++;
      else if (first.status === 202) runIds.add(String(first.body.runId));
      await sleep(20 + Math.random() * 200);
    }
    const r = await send(order);
    if (r === 'timeout' || r.status !== 202) {
      const what = r === 'timeout' ? 'timed out' : `${r.status} ${JSON.stringify(r.body)}`;
      result.errors.push(`order ${order.orderId} was not accepted: ${what}`);
      return;
    }
    runIds.add(String(r.body.runId));
    if (runIds.size > 1) {
      result.errors.push(`order ${order.orderId} got two runs: ${[...runIds].join(', ')}`);
    } else if (order.resend) {
      result.resentSameRun++;
    }
    result.accepted.set(order.orderId, String(r.body.runId));
    o.onAccepted?.(result.accepted.size, order.orderId, String(r.body.runId));
  };

  let next = 0;
  const lanes = Array.from({ length: Math.min(o.concurrency, o.orders) }, async () => {
    while (next < o.orders) {
      const i = next++;
      await one(makeOrder(o.prefix, i, resendEvery));
    }
  });
  await Promise.all(lanes);
  return result;
}
