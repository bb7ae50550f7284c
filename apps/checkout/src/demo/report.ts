/**
 * The demo's verdict: what happened (counted in PostgreSQL and at the fakes), and the
 * invariants Cyclone promises, each with the reason when it does not hold.
 */
import type { Client } from '@cyclone/core';
import Table from 'cli-table3';
import type { Fakes } from '../fakes.js';
import { NODES } from '../workflow.js';
import type { HeldStep } from './chaos.js';
import type { LoadResult } from './load.js';

export interface Figures {
  ordersSent: number;
  httpRequests: number;
  ordersAccepted: number;
  resent: number;
  resentSameRun: number;
  runs: number;
  runsCompleted: number;
  runsFailed: number;
  charges: number;
  emails: number;
  sms: number;
  /** Shipments booked at the shipping API fake (`@cyclone/http`). */
  shipments: number;
  /** Effects beyond one per order, over the providers and the completion-tx writes. */
  duplicates: number;
  /** Provider requests (each attempt that reached a fake, re-sends included). */
  providerRequests: { stripe: number; sendgrid: number; twilio: number; shipping: number };
  stepsWithRetries: number;
  /** Steps the killed workers still held when their sessions ended. */
  stepsHeldByKilledWorkers: number;
  /** Of those, the ones the recovery sweep took back (a lease_expired entry for that attempt). */
  stepsRecoveredFromDeadWorkers: number;
  /** Workers SIGKILLed while they held steps. */
  workersKilled: number;
  /** SIGKILLs that came just after the victim's steps had finished (not counted above). */
  killsMissed: number;
  responsesDropped: number;
  unknownOutcomesResolved: number;
  unknownOutcomes: { provider: string; resolvedBy: string; count: number }[];
  unresolvedLedgerKeys: number;
  completionTxRows: number;
  ordersFulfilled: number;
  stockTaken: number;
  stockOrdered: number;
  wallSeconds: number;
}

export interface Check {
  name: string;
  ok: boolean;
  detail: string;
}

export interface Verdict {
  figures: Figures;
  checks: Check[];
  ok: boolean;
}

export interface VerdictInput {
  client: Client;
  fakes: Fakes;
  load: LoadResult;
  ordersSent: number;
  prefix: string;
  killedWorkerIds: string[];
  /** Workers killed when they held no step any more. */
  missedKillIds: string[];
  /** What the killed workers still held when their sessions ended. */
  heldByKilled: HeldStep[];
  killsWanted: boolean;
  faultsInjected: number;
  faultsHit: number;
  stockBefore: number;
  stockAfter: number;
  wallSeconds: number;
}

/** Counts effects per order id: how many orders have 0, and how many effects are extra. */
function perOrder(orderIds: Iterable<string>, effectOrderIds: (string | undefined)[]) {
  const counts = new Map<string, number>();
  for (const id of effectOrderIds) if (id) counts.set(id, (counts.get(id) ?? 0) + 1);
  let missing = 0;
  let extra = 0;
  let foreign = 0;
  const known = new Set(orderIds);
  for (const id of known) {
    const n = counts.get(id) ?? 0;
    if (n === 0) missing++;
    extra += Math.max(0, n - 1);
  }
  for (const [id, n] of counts) if (!known.has(id)) foreign += n;
  return { missing, extra, foreign, total: effectOrderIds.length };
}

export async function verdict(v: VerdictInput): Promise<Verdict> {
  const q = async <T>(text: string, values: unknown[]): Promise<T> =>
    (await v.client.pool.query(text, values)).rows[0] as T;
  const like = `${v.prefix}-%`;
  const orderIds = [...v.load.accepted.keys()];
  const runIds = [...v.load.accepted.values()];

  const runs = await q<{ runs: number; completed: number; failed: number }>(
    `SELECT count(*)::int AS runs,
            count(*) FILTER (WHERE state = 'completed')::int AS completed,
            count(*) FILTER (WHERE state = 'failed')::int AS failed
     FROM cyclone.cyclone_runs WHERE workflow = 'checkout' AND input->>'orderId' LIKE $1`,
    [like],
  );
  const steps = await q<{ retried: number }>(
    'SELECT count(*) FILTER (WHERE attempt > 1)::int AS retried FROM cyclone.cyclone_steps WHERE run_id = ANY($1::uuid[])',
    [runIds],
  );
  // A held step recovered from its dead worker: the sweep recorded the expiry of that very
  // attempt's lease, naming the owner. Counted per held step, so exactly what the victims held.
  const expired = await v.client.pool.query<{
    run_id: string;
    node: string;
    errors: { kind: string; attempt: number; message: string }[];
  }>(
    `SELECT run_id, node, errors FROM cyclone.cyclone_steps
     WHERE run_id = ANY($1::uuid[]) AND errors @> '[{"kind": "lease_expired"}]'`,
    [[...new Set(v.heldByKilled.map((h) => h.runId))]],
  );
  const errorsOf = new Map(expired.rows.map((r) => [`${r.run_id}:${r.node}`, r.errors]));
  const recovered = v.heldByKilled.filter((h) =>
    (errorsOf.get(`${h.runId}:${h.node}`) ?? []).some(
      (e) => e.kind === 'lease_expired' && e.attempt === h.attempt && e.message.includes(h.owner),
    ),
  ).length;
  const heldTotal = v.heldByKilled.length;
  const events = await q<{ rows: number; pairs: number }>(
    `SELECT count(*)::int AS rows, count(DISTINCT (order_id, node))::int AS pairs
     FROM checkout.order_events WHERE order_id LIKE $1`,
    [like],
  );
  const orders = await q<{ fulfilled: number; quantity: number }>(
    `SELECT count(*) FILTER (WHERE status = 'fulfilled')::int AS fulfilled,
            coalesce(sum(quantity), 0)::int AS quantity
     FROM checkout.orders WHERE order_id LIKE $1`,
    [like],
  );
  const unknown = await v.client.pool.query<{ provider: string; resolved_by: string; n: number }>(
    `SELECT provider, resolved_by, count(*)::int AS n FROM checkout.unknown_outcomes
     WHERE run_id = ANY($1::uuid[]) GROUP BY 1, 2 ORDER BY 1, 2`,
    [runIds],
  );
  const ledger = await q<{ open: number }>(
    `SELECT count(*)::int AS open FROM cyclone.cyclone_idempotency
     WHERE run_id = ANY($1::uuid[]) AND phase <> 'succeeded'`,
    [runIds],
  );

  // At the fakes: one effect per order, matched by the order id each effect carries.
  const { stripe, sendgrid, twilio, shipping } = v.fakes;
  const succeeded = stripe
    .objects('payment_intent')
    .filter((pi) => pi.status === 'succeeded')
    .map((pi) => (pi.metadata as Record<string, string> | undefined)?.order_id);
  const charges = perOrder(orderIds, succeeded);
  const mails = perOrder(
    orderIds,
    sendgrid.sent.map((m) => m.customArgs.order_id),
  );
  const texts = perOrder(
    orderIds,
    twilio.created.map((m) => /^Order (\S+) /.exec(m.body)?.[1]),
  );
  const shipments = perOrder(
    orderIds,
    shipping.effects.map((e) => {
      const id = (e.body as { order_id?: unknown } | null)?.order_id;
      return typeof id === 'string' ? id : undefined;
    }),
  );
  const eventDuplicates = events.rows - events.pairs;
  const duplicates =
    charges.extra +
    mails.extra +
    texts.extra +
    shipments.extra +
    eventDuplicates +
    Math.max(0, runs.runs - orderIds.length);
  const unknownResolved = unknown.rows.reduce((s, r) => s + r.n, 0);

  const figures: Figures = {
    ordersSent: v.ordersSent,
    httpRequests: v.load.requests,
    ordersAccepted: v.load.accepted.size,
    resent: v.load.resent,
    resentSameRun: v.load.resentSameRun,
    runs: runs.runs,
    runsCompleted: runs.completed,
    runsFailed: runs.failed,
    charges: stripe.count('charge'),
    emails: sendgrid.effects,
    sms: twilio.effects,
    shipments: shipping.count(),
    duplicates,
    providerRequests: {
      stripe: stripe.requestsTo('POST', '/v1/payment_intents').length,
      sendgrid: sendgrid.sendRequests.length,
      twilio: twilio.createRequests.length,
      shipping: shipping.keyedRequests.length,
    },
    stepsWithRetries: steps.retried,
    stepsHeldByKilledWorkers: heldTotal,
    stepsRecoveredFromDeadWorkers: recovered,
    workersKilled: v.killedWorkerIds.length,
    killsMissed: v.missedKillIds.length,
    responsesDropped: v.faultsHit,
    unknownOutcomesResolved: unknownResolved,
    unknownOutcomes: unknown.rows.map((r) => ({
      provider: r.provider,
      resolvedBy: r.resolved_by,
      count: r.n,
    })),
    unresolvedLedgerKeys: ledger.open,
    completionTxRows: events.rows,
    ordersFulfilled: orders.fulfilled,
    stockTaken: v.stockBefore - v.stockAfter,
    stockOrdered: orders.quantity,
    wallSeconds: v.wallSeconds,
  };

  const n = v.ordersSent;
  const accepted = figures.ordersAccepted;
  const effectCheck = (name: string, c: ReturnType<typeof perOrder>): Check => ({
    name: `exactly one ${name} per order`,
    ok: c.missing === 0 && c.extra === 0 && c.foreign === 0,
    detail: `${c.total} for ${accepted} orders: ${c.missing} missing, ${c.extra} duplicated${c.foreign ? `, ${c.foreign} for unknown orders` : ''}`,
  });
  const checks: Check[] = [
    {
      name: 'every order accepted',
      ok: accepted === n && v.load.errors.length === 0,
      detail:
        v.load.errors.length === 0
          ? `${accepted} / ${n}`
          : `${accepted} / ${n}; ${v.load.errors.length} problem(s), first: ${v.load.errors[0]}`,
    },
    {
      name: 're-sent orders got their first run back',
      ok: v.load.resentSameRun === v.load.resent,
      detail: `${v.load.resentSameRun} / ${v.load.resent} (${v.load.abandoned} first requests abandoned by the client)`,
    },
    {
      name: 'one run per order',
      ok: runs.runs === accepted,
      detail: `${runs.runs} runs for ${accepted} orders`,
    },
    {
      name: 'every run completed',
      ok: runs.completed === accepted,
      detail: `${runs.completed} completed, ${runs.failed} failed, ${runs.runs - runs.completed - runs.failed} other`,
    },
    effectCheck('charge (Stripe)', charges),
    effectCheck('e-mail (SendGrid)', mails),
    effectCheck('SMS (Twilio)', texts),
    effectCheck('shipment (shipping API)', shipments),
    {
      name: 'completion-transaction writes exactly once',
      ok: events.rows === accepted * NODES.length && events.pairs === events.rows,
      detail: `${events.rows} rows for ${events.pairs} (order, node) pairs; ${accepted * NODES.length} expected`,
    },
    {
      name: 'stock taken once per order, every order fulfilled',
      ok: figures.stockTaken === figures.stockOrdered && orders.fulfilled === accepted,
      detail: `${figures.stockTaken} units taken for ${figures.stockOrdered} ordered; ${orders.fulfilled} / ${accepted} fulfilled`,
    },
    {
      name: 'no unresolved provider call',
      ok: ledger.open === 0,
      detail: `${ledger.open} ledger keys not succeeded`,
    },
  ];
  if (v.killsWanted) {
    const k = figures.workersKilled;
    checks.push({
      name: 'killed workers’ steps recovered',
      ok: k > 0 && heldTotal > 0 && recovered === heldTotal,
      detail: `${k} worker${k === 1 ? '' : 's'} SIGKILLed holding ${heldTotal} step${heldTotal === 1 ? '' : 's'}; ${recovered} of ${heldTotal} run again by others`,
    });
  }
  if (v.faultsInjected > 0) {
    const settled = new Set(unknown.rows.map((r) => r.provider));
    const unsettled = ['stripe', 'sendgrid', 'twilio'].filter((p) => !settled.has(p));
    checks.push({
      name: 'dropped responses settled without a second effect',
      ok: v.faultsHit === v.faultsInjected && unsettled.length === 0,
      detail: `${v.faultsHit} / ${v.faultsInjected} providers dropped a response after the effect; ${unknownResolved} unknown outcomes resolved${unsettled.length ? `, none for ${unsettled.join(', ')}` : ''}`,
    });
  }
  return { figures, checks, ok: checks.every((c) => c.ok) };
}

/** The summary table and the checks, as text. */
export function render(v: Verdict): string {
  const f = v.figures;
  const t = new Table({
    style: { head: [], border: [] },
    // One frame, no rules between the rows.
    chars: { mid: '', 'left-mid': '', 'mid-mid': '', 'right-mid': '' },
  });
  const how = f.unknownOutcomes.map((u) => `${u.provider}: ${u.count} ${u.resolvedBy}`);
  t.push(
    ['orders sent / HTTP requests', `${f.ordersSent} / ${f.httpRequests}`],
    ['orders accepted', f.ordersAccepted],
    ['re-sent after a client timeout → same run', `${f.resentSameRun} / ${f.resent}`],
    ['runs', f.runs],
    ['runs completed', f.runsCompleted],
    ['charges counted at the Stripe fake', `${f.charges} (${f.providerRequests.stripe} requests)`],
    [
      'e-mails counted at the SendGrid fake',
      `${f.emails} (${f.providerRequests.sendgrid} requests)`,
    ],
    ['SMS counted at the Twilio fake', `${f.sms} (${f.providerRequests.twilio} requests)`],
    [
      'shipments counted at the shipping fake',
      `${f.shipments} (${f.providerRequests.shipping} requests)`,
    ],
    ['duplicates (must be 0)', f.duplicates],
    ['steps with attempts > 1', f.stepsWithRetries],
    ['workers SIGKILLed', f.workersKilled],
    ['SIGKILLs just after the steps finished (not counted)', f.killsMissed],
    [
      'steps held by killed workers / recovered',
      `${f.stepsHeldByKilledWorkers} / ${f.stepsRecoveredFromDeadWorkers}`,
    ],
    ['provider responses dropped after the effect', f.responsesDropped],
    ['unknown outcomes resolved', [f.unknownOutcomesResolved, ...how].join('\n')],
    ['wall time', `${f.wallSeconds.toFixed(1)} s`],
  );
  const lines = [t.toString(), ''];
  for (const c of v.checks) lines.push(`  ${c.ok ? '✓' : '✗'} ${c.name}: ${c.detail}`);
  return lines.join('\n');
}
