/**
 * The order service's HTTP API (Fastify):
 *
 * - `POST /orders` validates the order (zod; 400 with the issues), computes the amount from the
 *   catalog and submits a checkout run with `submitOnce`, keyed by the client's
 *   `Idempotency-Key` header, or by the order id when there is none. 202 with the run id. The
 *   same request again (a client retrying after a timeout) gets the same run; the same key with
 *   another body is a 422; another key for an order id that already has a run is a 409.
 * - `GET /orders/:id` (an order id or a run id): the order, its run and each node's state.
 * - `POST /orders/:id/approve`: approves an order held for approval (over $100): sends its run the
 *   signal `approved`, which its `approval` node waits for. 202 once stored (again, replayed);
 *   404 for no such order; 409 when the order needs no approval, its approval timed out, or its
 *   run has finished.
 * - `POST /hooks/sendgrid` and `POST /hooks/twilio/status`: the providers' webhooks, recorded by
 *   the adapters; they are what settles an e-mail or SMS whose response was lost.
 */
import {
  type Client,
  InputValidationError,
  InvalidStateError,
  RunNotFoundError,
  type StepInfo,
  SubmitKeyConflictError,
} from '@cyclone/core';
import { handleEventWebhook } from '@cyclone/sendgrid';
import { handleStatusCallback } from '@cyclone/twilio';
import Fastify, { type FastifyInstance } from 'fastify';
import { z } from 'zod';
import { CATALOG, SKUS } from './schema.js';
import {
  APPROVAL_SIGNAL,
  APPROVAL_THRESHOLD_CENTS,
  type ApprovalOutput,
  type CheckoutWorkflow,
  checkoutWorkflow,
  needsApproval,
  type OrderInput,
} from './workflow.js';

/** The body of `POST /orders`. Unknown fields are refused, so a typo is not silently dropped. */
export const OrderRequest = z.strictObject({
  orderId: z
    .string()
    .regex(
      /^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$/,
      'letters, digits, _ and -, starting with a letter or digit, at most 64 characters',
    ),
  sku: z.enum(SKUS),
  quantity: z.number().int().min(1).max(10),
  email: z.email(),
  phone: z.string().regex(/^\+[1-9]\d{6,14}$/, 'an E.164 phone number such as +15551234567'),
  /** A Stripe PaymentMethod id; the test card by default. */
  paymentMethod: z
    .string()
    .regex(/^pm_[A-Za-z0-9_]+$/, 'a Stripe PaymentMethod id (pm_…)')
    .default('pm_card_visa'),
});
export type OrderRequest = z.infer<typeof OrderRequest>;

/** The body of `POST /orders/:id/approve` (optional): who approves. */
export const ApprovalRequest = z.strictObject({
  by: z.string().min(1).max(200).optional(),
});

/** The answer to an approval that was stored (202). */
export interface ApprovalAccepted {
  orderId: string;
  runId: string;
  /** False when the order had been approved already: the first approval stands. */
  accepted: boolean;
  links: { self: string };
}

/** The `Idempotency-Key` header: 1–255 visible ASCII characters. */
const IDEMPOTENCY_KEY = /^[\x21-\x7e]{1,255}$/;

/** The answer to an accepted order (202). */
export interface OrderAccepted {
  orderId: string;
  runId: string;
  /** False when the request repeated one already accepted: the run is the earlier one. */
  created: boolean;
  links: { self: string };
}

/** What `GET /orders/:id` answers. */
export interface OrderView {
  orderId: string;
  runId: string;
  /** The run's state: running, completed, failed or cancelled. */
  state: string;
  order: {
    status: string;
    sku: string;
    quantity: number;
    amountCents: number;
    currency: string;
    email: string;
    phone: string;
    paymentIntent: string | null;
    receiptMessageId: string | null;
    smsSid: string | null;
    refundId: string | null;
    followUpMessageId: string | null;
    createdAt: string;
    fulfilledAt: string | null;
    refundedAt: string | null;
    followedUpAt: string | null;
  };
  /**
   * Null for an order that needs no approval. Else `pending` (not charged yet), `waiting` (from
   * the charge until `deadline`, PostgreSQL's clock), `approved` or `timed_out` (refunded).
   */
  approval: {
    state: 'pending' | 'waiting' | 'approved' | 'timed_out';
    deadline: string | null;
    by: string | null;
  } | null;
  steps: {
    node: string;
    state: string;
    attempt: number;
    maxAttempts: number;
    lastError: { attempt: number; kind: string; message: string } | null;
    completedAt: string | null;
  }[];
  createdAt: string;
  completedAt: string | null;
}

/** An order id that already has a run under another submit key. */
class OrderExistsError extends Error {
  constructor(
    readonly orderId: string,
    readonly runId: string,
  ) {
    super(`order ${orderId} was already submitted (run ${runId}) under another Idempotency-Key`);
  }
}

export interface ApiOptions {
  client: Client;
  /**
   * The workflow to submit. Default: `checkoutWorkflow()` (no providers needed to submit; its
   * timers and approval timeout from `CHECKOUT_TIMINGS`).
   */
  workflow?: CheckoutWorkflow;
  /** The token Twilio signs status callbacks with. Without it the route answers 404. */
  twilioAuthToken?: string;
  /** SendGrid's Signed Event Webhook key; without it events are accepted unsigned. */
  sendgridVerificationKey?: string;
  /**
   * The public origin the providers call (`PUBLIC_URL`), which Twilio signs. Default: the
   * request's own `Host`.
   */
  publicUrl?: string;
  /** Fastify's request log (pino) on stdout. Default false. */
  logger?: boolean;
}

/** Builds the API (not listening: call `listen`, or `inject` in tests). */
export function buildApi(options: ApiOptions): FastifyInstance {
  const { client } = options;
  const workflow = options.workflow ?? checkoutWorkflow();
  /** The approval's timeout, for the deadline of an approval not parked yet. */
  const approvalTimeoutMs = workflow.nodeByName.get('approval')?.waitTimeoutMs;
  const app = Fastify({ logger: options.logger ?? false });

  app.setErrorHandler((err: Error & { statusCode?: number; code?: string }, req, reply) => {
    const status = err.statusCode ?? 500;
    if (status < 500) {
      // Malformed JSON, a wrong content type, a body over the limit…
      return reply.code(status).send({ error: 'bad_request', message: err.message });
    }
    req.log.error({ err }, 'request failed');
    return reply.code(500).send({ error: 'internal', message: 'internal error' });
  });
  app.setNotFoundHandler((req, reply) =>
    reply.code(404).send({ error: 'not_found', message: `no route ${req.method} ${req.url}` }),
  );

  app.get('/health', async () => ({ ok: true }));

  app.post('/orders', async (req, reply) => {
    const parsed = OrderRequest.safeParse(req.body);
    if (!parsed.success) {
      return reply.code(400).send({
        error: 'invalid_order',
        message: 'the order is not valid',
        issues: parsed.error.issues.map((i) => ({
          path: i.path.join('.'),
          message: i.message,
          code: i.code,
        })),
      });
    }
    const order = parsed.data;
    const header = req.headers['idempotency-key'];
    const key = Array.isArray(header) ? header[0] : header;
    if (key !== undefined && !IDEMPOTENCY_KEY.test(key)) {
      return reply.code(400).send({
        error: 'invalid_idempotency_key',
        message: 'Idempotency-Key must be 1 to 255 visible ASCII characters',
      });
    }
    // The run's identity: the client's key, or the order id when the client sends none.
    const submitKey = key !== undefined ? `idempotency-key:${key}` : `order:${order.orderId}`;
    const input: OrderInput = {
      ...order,
      amountCents: CATALOG[order.sku] * order.quantity,
      currency: 'usd',
    };
    try {
      const { runId, created } = await submitOrder(client, workflow, submitKey, input);
      const self = `/orders/${encodeURIComponent(order.orderId)}`;
      reply.code(202).header('location', self);
      if (!created) reply.header('idempotent-replayed', 'true');
      const body: OrderAccepted = { orderId: order.orderId, runId, created, links: { self } };
      return body;
    } catch (err) {
      if (err instanceof SubmitKeyConflictError) {
        return reply.code(422).send({
          error: 'idempotency_key_reused',
          message:
            key !== undefined
              ? `Idempotency-Key ${JSON.stringify(key)} was already used for a different order (run ${err.runId}); use a new key for a new order`
              : `order ${order.orderId} was already submitted with different contents (run ${err.runId})`,
          runId: err.runId,
        });
      }
      if (err instanceof OrderExistsError) {
        return reply
          .code(409)
          .send({ error: 'order_exists', message: err.message, runId: err.runId });
      }
      if (err instanceof InputValidationError) {
        return reply.code(400).send({
          error: 'invalid_order',
          message: err.message,
          issues: err.issues.map((i) => ({ path: i.path.join('.'), message: i.message })),
        });
      }
      throw err;
    }
  });

  app.get<{ Params: { id: string } }>('/orders/:id', async (req, reply) => {
    const view = await orderView(client, req.params.id, approvalTimeoutMs);
    if (!view) {
      return reply
        .code(404)
        .send({ error: 'not_found', message: `no order or run ${JSON.stringify(req.params.id)}` });
    }
    return view;
  });

  app.post<{ Params: { id: string } }>('/orders/:id/approve', async (req, reply) => {
    const parsed = ApprovalRequest.safeParse(req.body ?? {});
    if (!parsed.success) {
      return reply.code(400).send({
        error: 'invalid_approval',
        message: 'the approval is not valid',
        issues: parsed.error.issues.map((i) => ({
          path: i.path.join('.'),
          message: i.message,
          code: i.code,
        })),
      });
    }
    const id = req.params.id;
    const o = await orderRow(client, id);
    const notFound = () =>
      reply
        .code(404)
        .send({ error: 'not_found', message: `no order or run ${JSON.stringify(id)}` });
    if (!o) return notFound();
    const orderId: string = o.order_id;
    const runId: string = o.run_id;
    if (!needsApproval(o.amount_cents)) {
      return reply.code(409).send({
        error: 'approval_not_required',
        message: `order ${orderId} (${dollars(o.amount_cents)}) is not over ${dollars(APPROVAL_THRESHOLD_CENTS)}: it was never held`,
        runId,
      });
    }
    // A wait that already timed out takes no approval (a signal would be stored, and ignored).
    let approval: Awaited<ReturnType<typeof approvalOf>>;
    try {
      approval = await approvalOf(client, runId, approvalTimeoutMs);
    } catch (err) {
      if (err instanceof RunNotFoundError) return notFound(); // deleted by retention
      throw err;
    }
    if (approval?.state === 'timed_out') {
      return reply.code(409).send({
        error: 'approval_timed_out',
        message: `order ${orderId} was not approved in time; it is refunded`,
        runId,
      });
    }
    let accepted: boolean;
    try {
      ({ accepted } = await client.signal(runId, APPROVAL_SIGNAL, {
        approved: true,
        by: parsed.data.by ?? null,
      }));
    } catch (err) {
      if (err instanceof RunNotFoundError) return notFound();
      if (err instanceof InvalidStateError) {
        return reply.code(409).send({
          error: 'order_finished',
          message: `order ${orderId} is settled (its run is ${err.state}): nothing left to approve`,
          runId,
        });
      }
      throw err;
    }
    const self = `/orders/${encodeURIComponent(orderId)}`;
    reply.code(202).header('location', self);
    if (!accepted) reply.header('idempotent-replayed', 'true');
    const body: ApprovalAccepted = { orderId, runId, accepted, links: { self } };
    return body;
  });

  // The providers' webhooks need the raw body (SendGrid signs it; Twilio posts a form): their
  // own body parsers, scoped to this plugin.
  app.register(async (hooks) => {
    const asString = { parseAs: 'string' as const };
    hooks.addContentTypeParser('application/json', asString, (_req, body, done) =>
      done(null, body),
    );
    hooks.addContentTypeParser('application/x-www-form-urlencoded', asString, (_req, body, done) =>
      done(null, body),
    );

    hooks.post('/hooks/sendgrid', async (req, reply) => {
      const r = await handleEventWebhook(
        {
          pool: client.pool,
          schema: client.schema,
          verificationKey: options.sendgridVerificationKey,
        },
        { body: typeof req.body === 'string' ? req.body : '', headers: req.headers },
      );
      return reply
        .code(r.status)
        .send(r.status === 200 ? { recorded: r.recorded, ignored: r.ignored } : { error: r.error });
    });

    hooks.post('/hooks/twilio/status', async (req, reply) => {
      if (!options.twilioAuthToken) return reply.code(404).send({ error: 'not_found' });
      const params: Record<string, string | string[]> = {};
      for (const [k, v] of new URLSearchParams(typeof req.body === 'string' ? req.body : '')) {
        const had = params[k];
        params[k] = had === undefined ? v : [...(Array.isArray(had) ? had : [had]), v];
      }
      const origin = options.publicUrl ?? `${req.protocol}://${req.headers.host}`;
      const signature = req.headers['x-twilio-signature'];
      const token = req.headers['i-twilio-idempotency-token'];
      const r = await handleStatusCallback(
        { pool: client.pool, schema: client.schema, authToken: options.twilioAuthToken },
        {
          url: new URL(req.url, origin).toString(),
          signature: Array.isArray(signature) ? signature[0] : signature,
          params,
          deliveryToken: Array.isArray(token) ? token[0] : token,
        },
      );
      return r.status === 204
        ? reply.code(204).send()
        : reply.code(r.status).send({ error: r.reason });
    });
  });

  return app;
}

/**
 * Submits the order's run and writes its order row in one transaction, so an order exists
 * exactly when its run does. `submitOnce` deduplicates by `submitKey` (a unique index): a
 * concurrent duplicate waits for this transaction and then finds the run.
 * @throws SubmitKeyConflictError (same key, another order); OrderExistsError (the order id has
 *   a run under another key).
 */
async function submitOrder(
  client: Client,
  workflow: CheckoutWorkflow,
  submitKey: string,
  input: OrderInput,
): Promise<{ runId: string; created: boolean }> {
  const c = await client.pool.connect();
  try {
    await c.query('BEGIN');
    const result = await workflow.submitOnce(client, submitKey, input, { tx: c });
    if (result.created) {
      const ins = await c.query(
        `INSERT INTO checkout.orders (order_id, run_id, submit_key, sku, quantity, amount_cents,
           currency, email, phone)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
         ON CONFLICT (order_id) DO NOTHING RETURNING run_id`,
        [
          input.orderId,
          result.runId,
          submitKey,
          input.sku,
          input.quantity,
          input.amountCents,
          input.currency,
          input.email,
          input.phone,
        ],
      );
      if (!ins.rows[0]) {
        const { rows } = await c.query<{ run_id: string }>(
          'SELECT run_id FROM checkout.orders WHERE order_id = $1',
          [input.orderId],
        );
        throw new OrderExistsError(input.orderId, rows[0]?.run_id ?? 'unknown');
      }
    }
    await c.query('COMMIT');
    return result;
  } catch (err) {
    await c.query('ROLLBACK').catch(() => {});
    throw err;
  } finally {
    c.release();
  }
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** The order's row, by order id or run id. */
// biome-ignore lint/suspicious/noExplicitAny: a row of checkout.orders, read field by field
async function orderRow(client: Client, id: string): Promise<any> {
  const { rows } = await client.pool.query(
    UUID.test(id)
      ? 'SELECT * FROM checkout.orders WHERE order_id = $1 OR run_id = $1::uuid LIMIT 1'
      : 'SELECT * FROM checkout.orders WHERE order_id = $1',
    [id],
  );
  return rows[0];
}

/** `$123.45`. */
const dollars = (cents: number) => `$${(cents / 100).toFixed(2)}`;

/**
 * The approval of a held order, from its run's steps; null when it was skipped. It waits from
 * the moment the charge completed (its deadline counts from then), parked or not yet.
 */
function approvalFrom(steps: StepInfo[], timeoutMs: number | undefined): OrderView['approval'] {
  const step = steps.find((s) => s.node === 'approval');
  if (!step || step.state === 'skipped') return null;
  if (step.state === 'completed') {
    const out = step.output as ApprovalOutput;
    if (out && 'timedOut' in out) return { state: 'timed_out', deadline: null, by: null };
    return { state: 'approved', deadline: null, by: out?.by ?? null };
  }
  // Parked until its signal or its deadline: the time it is due again.
  if (step.state === 'scheduled') {
    return { state: 'waiting', deadline: step.scheduledAt.toISOString(), by: null };
  }
  const charged = steps.find((s) => s.node === 'charge')?.completedAt;
  if (step.state !== 'pending' && charged) {
    const deadline = timeoutMs === undefined ? null : new Date(charged.getTime() + timeoutMs);
    return { state: 'waiting', deadline: deadline?.toISOString() ?? null, by: null };
  }
  return { state: 'pending', deadline: null, by: null };
}

async function approvalOf(
  client: Client,
  runId: string,
  timeoutMs: number | undefined,
): Promise<OrderView['approval']> {
  return approvalFrom((await client.getRun(runId)).steps, timeoutMs);
}

/**
 * The order with its run, by order id or run id; undefined when there is none.
 * `approvalTimeoutMs`: the workflow's, for the deadline of an approval not parked yet.
 */
export async function orderView(
  client: Client,
  id: string,
  approvalTimeoutMs?: number,
): Promise<OrderView | undefined> {
  const o = await orderRow(client, id);
  if (!o) return undefined;
  let run: Awaited<ReturnType<Client['getRun']>>;
  try {
    run = await client.getRun(o.run_id);
  } catch (err) {
    if (err instanceof RunNotFoundError) return undefined; // deleted by retention
    throw err;
  }
  const iso = (d: Date | null) => (d ? d.toISOString() : null);
  return {
    orderId: o.order_id,
    runId: run.runId,
    state: run.state,
    order: {
      status: o.status,
      sku: o.sku,
      quantity: o.quantity,
      amountCents: o.amount_cents,
      currency: o.currency,
      email: o.email,
      phone: o.phone,
      paymentIntent: o.payment_intent,
      receiptMessageId: o.receipt_message_id,
      smsSid: o.sms_sid,
      refundId: o.refund_id,
      followUpMessageId: o.follow_up_message_id,
      createdAt: o.created_at.toISOString(),
      fulfilledAt: iso(o.fulfilled_at),
      refundedAt: iso(o.refunded_at),
      followedUpAt: iso(o.followed_up_at),
    },
    approval: needsApproval(o.amount_cents)
      ? (approvalFrom(run.steps, approvalTimeoutMs) ?? {
          state: 'pending',
          deadline: null,
          by: null,
        })
      : null,
    steps: run.steps.map((s: StepInfo) => {
      const last = s.errors.at(-1);
      return {
        node: s.node,
        state: s.state,
        attempt: s.attempt,
        maxAttempts: s.maxAttempts,
        lastError: last ? { attempt: last.attempt, kind: last.kind, message: last.message } : null,
        completedAt: iso(s.completedAt),
      };
    }),
    createdAt: run.createdAt.toISOString(),
    completedAt: iso(run.completedAt),
  };
}
