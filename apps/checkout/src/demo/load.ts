/**
 * The load generator: N orders over HTTP, as clients would send them. Most carry an
 * `Idempotency-Key` (a UUID per order), some rely on the order id. A share of them is sent
 * twice the way a client does after a timeout: the first request is abandoned after a few
 * milliseconds (the server may or may not have accepted it), then the same request is sent
 * again. Every answer for an order must name the same run.
 *
 * One order in ten is over $100 and held for approval. The approver (a person, here) approves
 * every other one of those once the API shows it waiting (`GET /orders/:id`: charged, and not
 * decided), a few hundred milliseconds later (`POST /orders/:id/approve`), and leaves the
 * others to time out.
 */
import { randomUUID } from 'node:crypto';
import type { OrderView } from '../api.js';
import { CATALOG, SKUS, type Sku } from '../schema.js';
import { needsApproval } from '../workflow.js';

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
  /** Problems: a refused order, answers naming different runs, an approval that failed. */
  errors: string[];
  /** Orders over the approval threshold (held for approval). */
  held: string[];
  /**
   * Held orders the approver approved: when it sent the approval (ms) and the answer, 202, or
   * 409 `approval_timed_out` or `order_finished` when it was too late (that order is refunded).
   */
  approvals: Map<string, { sentAtMs: number; status: number; error?: string }>;
  /** Held orders the approver left to time out. */
  leftToTimeOut: string[];
}

interface Order {
  orderId: string;
  body: Record<string, unknown>;
  key: string | undefined;
  resend: boolean;
  /** Over the approval threshold. */
  held: boolean;
  /** The approver approves it (held orders only). */
  approve: boolean;
}

/** Builds order `i` of the batch: deterministic, except its Idempotency-Key (a fresh UUID). */
function makeOrder(prefix: string, i: number, resendEvery: number): Order {
  const orderId = `${prefix}-${String(i).padStart(5, '0')}`;
  // One in ten: 5 gadgets ($247.50), over the approval threshold; the others are under it.
  const large = i % 10 === 7;
  const sku: Sku = large ? 'gadget' : (SKUS[i % SKUS.length] as Sku);
  const quantity = large ? 5 : 1 + (i % 3);
  const held = needsApproval(CATALOG[sku] * quantity);
  return {
    orderId,
    body: {
      orderId,
      sku,
      quantity,
      email: `customer${i}@example.com`,
      phone: `+1555${String(1_000_000 + i).slice(-7)}`,
    },
    // Three clients in four send a key; the fourth relies on the order id.
    key: i % 4 === 3 ? undefined : randomUUID(),
    resend: resendEvery > 0 && i % resendEvery === 0,
    held,
    // Every other held order is approved (7, 27, 47…); 17, 37, 57… time out.
    approve: held && Math.floor(i / 10) % 2 === 0,
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
    held: [],
    approvals: new Map(),
    leftToTimeOut: [],
  };
  /** The approvers at work (each waits for its order to be held), awaited at the end. */
  const approvers: Promise<void>[] = [];
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

  /**
   * The approver of one held order: looks at it (GET) until it waits for its approval, thinks
   * for a moment, then approves it (POST …/approve, expecting 202).
   */
  const approve = async (orderId: string) => {
    const url = `${o.apiUrl}/orders/${encodeURIComponent(orderId)}`;
    for (const deadline = Date.now() + 120_000; ; await sleep(250)) {
      if (Date.now() > deadline) {
        result.errors.push(`order ${orderId} was never seen waiting for its approval`);
        return;
      }
      const view = await fetch(url, { signal: AbortSignal.timeout(10_000) })
        .then((r) => (r.ok ? (r.json() as Promise<OrderView>) : undefined))
        .catch(() => undefined);
      const state = view?.approval?.state;
      if (state === 'waiting') break;
      if (view && (view.state !== 'running' || (state && state !== 'pending'))) break; // too late
    }
    await sleep(100 + Math.random() * 300);
    const sentAtMs = Date.now();
    try {
      const res = await fetch(`${url}/approve`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ by: 'demo-approver' }),
        signal: AbortSignal.timeout(15_000),
      });
      const body = (await res.json()) as { error?: string };
      result.approvals.set(orderId, { sentAtMs, status: res.status, error: body.error });
      // Too late is an outcome (the order is refunded), not a failure of the service.
      const late =
        res.status === 409 && /^(approval_timed_out|order_finished)$/.test(body.error ?? '');
      if (res.status !== 202 && !late) {
        result.errors.push(
          `the approval of order ${orderId} got ${res.status} ${JSON.stringify(body)}`,
        );
      }
    } catch (err) {
      result.approvals.set(orderId, { sentAtMs, status: 0 });
      result.errors.push(`the approval of order ${orderId} failed: ${String(err)}`);
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
    if (order.held) {
      result.held.push(order.orderId);
      if (order.approve) approvers.push(approve(order.orderId));
      else result.leftToTimeOut.push(order.orderId);
    }
  };

  let next = 0;
  const lanes = Array.from({ length: Math.min(o.concurrency, o.orders) }, async () => {
    while (next < o.orders) {
      const i = next++;
      await one(makeOrder(o.prefix, i, resendEvery));
    }
  });
  await Promise.all(lanes);
  await Promise.all(approvers);
  return result;
}
