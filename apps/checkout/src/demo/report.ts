/**
 * The demo's verdict: what happened (counted in PostgreSQL and at the fakes), and the
 * invariants Cyclone promises, each with the reason when it does not hold.
 */
import type { Client } from '@cyclone/core';
import Table from 'cli-table3';
import type { Fakes } from '../fakes.js';
import type { Discrepancy } from '../reconcile.js';
import { APPROVAL_SIGNAL, needsApproval, type Timings } from '../workflow.js';
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
  /** Refunds at the Stripe fake (held orders whose approval timed out). */
  refunds: number;
  emails: number;
  /** Of the e-mails: receipts, and follow-ups (`customArgs.kind`). */
  receipts: number;
  followUps: number;
  sms: number;
  /** Shipments booked at the shipping API fake (`@cyclone/http`). */
  shipments: number;
  /** Effects beyond one per order, over the providers and the completion-tx writes. */
  duplicates: number;
  /** Provider requests (each attempt that reached a fake, re-sends included). */
  providerRequests: {
    stripe: number;
    refunds: number;
    sendgrid: number;
    twilio: number;
    shipping: number;
  };
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
  ordersRefunded: number;
  /** Orders over the approval threshold, and how each ended. */
  held: number;
  heldApproved: number;
  heldTimedOut: number;
  /** Approvals the load generator sent (202), and those stored by their deadline. */
  approvalsSent: number;
  approvalsInTime: number;
  /** The follow-up's timer, and how long after its due time the earliest follow-up was sent. */
  followUpDelayMs: number;
  followUpEarliestAfterDueMs: number | null;
  reconciliation: ReconcileFigures;
  stockTaken: number;
  stockOrdered: number;
  wallSeconds: number;
}

/** The payment reconciliation schedule's runs during the demo. */
export interface ReconcileFigures {
  cron: string;
  /** Fire times from the workers' start to the last reconciliation (when the interval is known). */
  fireTimes: number | null;
  runs: number;
  missing: number;
  duplicated: number;
  discrepancies: number;
  firstDiscrepancy: Discrepancy | null;
  /** The reconciliation after every order had finished. */
  final: { charges: number; refunds: number; matched: number; pending: number } | null;
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
  timings: Timings;
  /** PostgreSQL's clock when the workers were up: every fire time after it must make one run. */
  reconcileFrom: Date;
  /** The fire time of the first reconciliation after every order finished (none: it never came). */
  reconcileUntil: Date | undefined;
}

/** The interval of a cron such as `*\/3 * * * * *` (every N seconds, N dividing a minute), ms. */
export function cronIntervalMs(cron: string): number | undefined {
  const m = /^\*\/(\d+) \* \* \* \* \*$/.exec(cron.trim());
  const n = Number(m?.[1]);
  return m && n > 0 && 60 % n === 0 ? n * 1000 : undefined;
}

/** One order of the batch: its amount and how its run ended, by PostgreSQL's clock. */
interface OrderOutcome {
  order_id: string;
  amount_cents: number;
  quantity: number;
  status: string;
  approval_state: string | null;
  timed_out: boolean;
  signal: boolean;
  /** The approval signal was stored by the wait's deadline. */
  signal_in_time: boolean | null;
  fulfil_state: string | null;
  refund_state: string | null;
  follow_state: string | null;
  /** The follow-up's first call (ledger) and its step's start, minus its due time, ms. */
  follow_call_after_due_ms: number | null;
  follow_start_after_due_ms: number | null;
  /** Completed steps that write on their completion transaction (every node but the wait). */
  writing_steps: number;
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
  // A wait node is claimed again when its signal or deadline comes: not a retry.
  const steps = await q<{ retried: number }>(
    `SELECT count(*) FILTER (WHERE attempt > 1 AND wait_for IS NULL)::int AS retried
     FROM cyclone.cyclone_steps WHERE run_id = ANY($1::uuid[])`,
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
  const orders = await q<{ fulfilled: number; refunded: number; quantity: number }>(
    `SELECT count(*) FILTER (WHERE status = 'fulfilled')::int AS fulfilled,
            count(*) FILTER (WHERE status = 'refunded')::int AS refunded,
            coalesce(sum(quantity) FILTER (WHERE status <> 'refunded'), 0)::int AS quantity
     FROM checkout.orders WHERE order_id LIKE $1`,
    [like],
  );
  // How each order ended: its approval, the branch that ran, the follow-up's times. The times
  // are PostgreSQL's: the follow-up is due at fulfil's completion plus its timer.
  const outcomes = (
    await v.client.pool.query<OrderOutcome>(
      `SELECT o.order_id, o.amount_cents, o.quantity, o.status,
              a.state AS approval_state,
              coalesce((a.output ->> 'timedOut')::boolean, false) AS timed_out,
              g.run_id IS NOT NULL AS signal,
              g.created_at <= a.wait_deadline AS signal_in_time,
              f.state AS fulfil_state, rf.state AS refund_state, u.state AS follow_state,
              (extract(epoch FROM (
                 (SELECT min(l.created_at) FROM cyclone.cyclone_idempotency l
                  WHERE l.run_id = o.run_id AND l.node = 'followUp')
                 - (f.completed_at + make_interval(secs => u.delay_ms / 1000.0)))) * 1000
              )::float8 AS follow_call_after_due_ms,
              (extract(epoch FROM (
                 u.started_at - (f.completed_at + make_interval(secs => u.delay_ms / 1000.0)))) * 1000
              )::float8 AS follow_start_after_due_ms,
              (SELECT count(*) FROM cyclone.cyclone_steps s
               WHERE s.run_id = o.run_id AND s.state = 'completed' AND s.wait_for IS NULL
              )::int AS writing_steps
       FROM checkout.orders o
       LEFT JOIN cyclone.cyclone_steps a ON a.run_id = o.run_id AND a.node = 'approval'
       LEFT JOIN cyclone.cyclone_steps f ON f.run_id = o.run_id AND f.node = 'fulfil'
       LEFT JOIN cyclone.cyclone_steps rf ON rf.run_id = o.run_id AND rf.node = 'refund'
       LEFT JOIN cyclone.cyclone_steps u ON u.run_id = o.run_id AND u.node = 'followUp'
       LEFT JOIN cyclone.cyclone_signals g ON g.run_id = o.run_id AND g.name = $2
       WHERE o.order_id LIKE $1`,
      [like, APPROVAL_SIGNAL],
    )
  ).rows;
  const shippedIds = outcomes.filter((o) => o.fulfil_state === 'completed').map((o) => o.order_id);
  const refundedIds = outcomes.filter((o) => o.refund_state === 'completed').map((o) => o.order_id);
  const expectedTxRows = outcomes.reduce((n, o) => n + o.writing_steps, 0);
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
  const orderOfPi = new Map(
    stripe
      .objects('payment_intent')
      .map((pi) => [pi.id, (pi.metadata as Record<string, string> | undefined)?.order_id]),
  );
  const succeeded = stripe
    .objects('payment_intent')
    .filter((pi) => pi.status === 'succeeded')
    .map((pi) => orderOfPi.get(pi.id));
  const charges = perOrder(orderIds, succeeded);
  // A refund names its payment intent, which names its order.
  const refunds = perOrder(
    refundedIds,
    stripe.objects('refund').map((r) => orderOfPi.get(String(r.payment_intent))),
  );
  const isFollowUp = (m: { customArgs: Record<string, string> }) =>
    m.customArgs.kind === 'follow_up';
  const mails = perOrder(
    orderIds,
    sendgrid.sent.filter((m) => !isFollowUp(m)).map((m) => m.customArgs.order_id),
  );
  const followUps = perOrder(
    shippedIds,
    sendgrid.sent.filter(isFollowUp).map((m) => m.customArgs.order_id),
  );
  const texts = perOrder(
    orderIds,
    twilio.created.map((m) => /^Order (\S+) /.exec(m.body)?.[1]),
  );
  // Shipped orders only: a shipment of a refunded order counts as foreign.
  const shipments = perOrder(
    shippedIds,
    shipping.effects.map((e) => {
      const id = (e.body as { order_id?: unknown } | null)?.order_id;
      return typeof id === 'string' ? id : undefined;
    }),
  );
  const eventDuplicates = events.rows - events.pairs;
  const duplicates =
    charges.extra +
    refunds.extra +
    mails.extra +
    followUps.extra +
    texts.extra +
    shipments.extra +
    eventDuplicates +
    Math.max(0, runs.runs - orderIds.length);
  const unknownResolved = unknown.rows.reduce((s, r) => s + r.n, 0);

  // Approvals: how each held order ended, against what the approver did.
  const held = outcomes.filter((o) => needsApproval(o.amount_cents));
  const small = outcomes.filter((o) => !needsApproval(o.amount_cents));
  const approved = held.filter((o) => o.approval_state === 'completed' && !o.timed_out);
  const timedOut = held.filter((o) => o.approval_state === 'completed' && o.timed_out);
  const sent = [...v.load.approvals].filter(([, a]) => a.status === 202);
  const tooLate = v.load.approvals.size - sent.length;
  const inTime = held.filter((o) => o.signal && o.signal_in_time === true);
  const effectsOf = (c: Map<string, number>, id: string) => c.get(id) ?? 0;
  const count = (ids: (string | undefined)[]) => {
    const m = new Map<string, number>();
    for (const id of ids) if (id) m.set(id, (m.get(id) ?? 0) + 1);
    return m;
  };
  const chargesBy = count(succeeded);
  const refundsBy = count(
    stripe.objects('refund').map((r) => orderOfPi.get(String(r.payment_intent))),
  );
  const shipmentsBy = count(
    shipping.effects.map((e) => (e.body as { order_id?: string } | null)?.order_id),
  );
  const followUpsBy = count(sendgrid.sent.filter(isFollowUp).map((m) => m.customArgs.order_id));
  /** Why a held order did not end exactly one way, or undefined when it did. */
  const heldProblem = (o: OrderOutcome): string | undefined => {
    const id = o.order_id;
    if (o.approval_state !== 'completed') return `${id}: approval ${o.approval_state}`;
    // The rule: an approval counts when it was stored by the deadline (both PostgreSQL's).
    if (!o.timed_out !== (o.signal && o.signal_in_time === true)) {
      return `${id}: ${o.timed_out ? 'timed out' : 'approved'} with ${o.signal ? (o.signal_in_time ? 'an approval in time' : 'a late approval') : 'no approval'}`;
    }
    if (v.load.leftToTimeOut.includes(id) && !o.timed_out) return `${id}: approved by nobody`;
    const effects = `${effectsOf(chargesBy, id)} charge, ${effectsOf(refundsBy, id)} refund, ${effectsOf(shipmentsBy, id)} shipment, ${effectsOf(followUpsBy, id)} follow-up`;
    const ok = o.timed_out
      ? o.refund_state === 'completed' &&
        o.fulfil_state === 'skipped' &&
        o.follow_state === 'skipped' &&
        o.status === 'refunded' &&
        effects === '1 charge, 1 refund, 0 shipment, 0 follow-up'
      : o.fulfil_state === 'completed' &&
        o.refund_state === 'skipped' &&
        o.follow_state === 'completed' &&
        o.status === 'fulfilled' &&
        effects === '1 charge, 0 refund, 1 shipment, 1 follow-up';
    return ok
      ? undefined
      : `${id}: ${o.timed_out ? 'timed out' : 'approved'}, fulfil ${o.fulfil_state}, refund ${o.refund_state}, follow-up ${o.follow_state}, ${o.status}; ${effects}`;
  };
  const heldProblems = held.map(heldProblem).filter((p): p is string => p !== undefined);
  const smallProblems = small
    .filter((o) => o.approval_state !== 'skipped' || o.signal)
    .map((o) => `${o.order_id}: approval ${o.approval_state}${o.signal ? ', signalled' : ''}`);

  // Follow-ups: none before its time, by the ledger's first call and the step's start.
  const followTimes = outcomes.filter((o) => o.fulfil_state === 'completed');
  const early = followTimes.filter(
    (o) =>
      o.follow_call_after_due_ms === null ||
      o.follow_call_after_due_ms < 0 ||
      (o.follow_start_after_due_ms ?? -1) < 0,
  );
  const afterDue = followTimes
    .map((o) => o.follow_call_after_due_ms)
    .filter((x): x is number => x !== null);
  const earliestAfterDue = afterDue.length > 0 ? Math.min(...afterDue) : null;

  const reconciliation = await reconcileFigures(v, runIds.length > 0);
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
    refunds: stripe.count('refund'),
    emails: sendgrid.effects,
    receipts: sendgrid.sent.filter((m) => !isFollowUp(m)).length,
    followUps: sendgrid.sent.filter(isFollowUp).length,
    sms: twilio.effects,
    shipments: shipping.count(),
    duplicates,
    providerRequests: {
      stripe: stripe.requestsTo('POST', '/v1/payment_intents').length,
      refunds: stripe.requestsTo('POST', '/v1/refunds').length,
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
    ordersRefunded: orders.refunded,
    held: held.length,
    heldApproved: approved.length,
    heldTimedOut: timedOut.length,
    approvalsSent: sent.length,
    approvalsInTime: inTime.length,
    followUpDelayMs: v.timings.followUpDelayMs,
    followUpEarliestAfterDueMs: earliestAfterDue,
    reconciliation,
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
    effectCheck('receipt e-mail (SendGrid)', mails),
    effectCheck('SMS (Twilio)', texts),
    {
      ...effectCheck('shipment (shipping API)', shipments),
      name: 'exactly one shipment (shipping API) per shipped order, none for a refunded one',
      detail: `${shipments.total} for ${shippedIds.length} shipped orders: ${shipments.missing} missing, ${shipments.extra} duplicated, ${shipments.foreign} for other orders`,
    },
    {
      ...effectCheck('refund (Stripe)', refunds),
      name: 'exactly one refund (Stripe) per timed-out order, none for the others',
      detail: `${refunds.total} for ${refundedIds.length} timed-out orders: ${refunds.missing} missing, ${refunds.extra} duplicated, ${refunds.foreign} for other orders`,
    },
    {
      name: 'completion-transaction writes exactly once',
      ok:
        events.rows === expectedTxRows &&
        events.pairs === events.rows &&
        outcomes.length === accepted,
      detail: `${events.rows} rows for ${events.pairs} (order, node) pairs; ${expectedTxRows} completed steps`,
    },
    {
      name: 'stock taken once per shipped order (put back when refunded), every order shipped or refunded',
      ok:
        figures.stockTaken === figures.stockOrdered &&
        orders.fulfilled + orders.refunded === accepted &&
        orders.fulfilled === shippedIds.length &&
        orders.refunded === refundedIds.length,
      detail: `${figures.stockTaken} units taken for ${figures.stockOrdered} shipped; ${orders.fulfilled} fulfilled + ${orders.refunded} refunded of ${accepted}`,
    },
    {
      name: 'orders up to $100 never held',
      ok: smallProblems.length === 0,
      detail:
        smallProblems.length === 0
          ? `${small.length} / ${small.length} skipped their approval, none waited`
          : `${smallProblems.length} held: ${smallProblems.slice(0, 3).join('; ')}`,
    },
    {
      name: 'held orders ended exactly one way',
      // Both ways shown (an approver too slow everywhere would leave only refunds).
      ok:
        heldProblems.length === 0 &&
        (held.length < 2 || (approved.length > 0 && timedOut.length > 0)),
      detail: `${held.length} held: ${approved.length} approved → charged once, shipped; ${timedOut.length} timed out → refunded once, not shipped (approvals: ${sent.length} accepted, ${inTime.length} by the deadline${tooLate ? `, ${tooLate} refused as too late` : ''}; ${v.load.leftToTimeOut.length} left to time out)${heldProblems.length ? `; ${heldProblems.length} otherwise: ${heldProblems.slice(0, 3).join('; ')}` : ''}`,
    },
    {
      name: 'exactly one follow-up e-mail (SendGrid) per shipped order, never before its time',
      ok:
        followUps.missing === 0 &&
        followUps.extra === 0 &&
        followUps.foreign === 0 &&
        early.length === 0,
      detail: `${followUps.total} for ${shippedIds.length} shipped orders: ${followUps.missing} missing, ${followUps.extra} duplicated, ${followUps.foreign} for refunded; ${early.length} before ${v.timings.followUpDelayMs} ms after the shipment${earliestAfterDue !== null ? ` (the earliest sent ${Math.round(earliestAfterDue)} ms after its time, by PostgreSQL's clock)` : ''}`,
    },
    reconcileRunsCheck(reconciliation),
    reconcileFoundCheck(reconciliation, accepted, refundedIds.length),
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

/**
 * The reconciliation runs with a fire time after the workers were up, up to the one after every
 * order finished; against the cron's fire times in that span.
 */
async function reconcileFigures(v: VerdictInput, any: boolean): Promise<ReconcileFigures> {
  const cron = v.timings.reconcileCron;
  const none: ReconcileFigures = {
    cron,
    fireTimes: null,
    runs: 0,
    missing: 0,
    duplicated: 0,
    discrepancies: 0,
    firstDiscrepancy: null,
    final: null,
  };
  const until = v.reconcileUntil;
  if (!until || !any) return none;
  const prefix = 'schedule:reconcile-payments:';
  const { rows } = await v.client.pool.query<{
    fire_ms: number;
    state: string;
    charges: number | null;
    refunds: number | null;
    matched: number | null;
    pending: number | null;
    discrepancies: Discrepancy[] | null;
  }>(
    `SELECT (extract(epoch FROM substr(r.submit_key, $1::int)::timestamptz) * 1000)::float8 AS fire_ms,
            r.state, c.charges, c.refunds, c.matched, c.pending, c.discrepancies
     FROM cyclone.cyclone_runs r
     LEFT JOIN checkout.reconciliations c ON c.run_id = r.id
     WHERE r.workflow = 'reconcile-payments' AND r.submit_key LIKE $2
       AND r.submit_key NOT LIKE $3
       AND substr(r.submit_key, $1::int)::timestamptz > $4
       AND substr(r.submit_key, $1::int)::timestamptz <= $5
     ORDER BY 1`,
    [prefix.length + 1, `${prefix}%`, `${prefix}trigger:%`, v.reconcileFrom, until],
  );
  const fired = new Set(rows.map((r) => Math.round(r.fire_ms)));
  const every = cronIntervalMs(cron);
  let fireTimes: number | null = null;
  let missing = 0;
  if (every) {
    fireTimes = 0;
    const from = v.reconcileFrom.getTime();
    for (let t = Math.floor(from / every) * every + every; t <= until.getTime(); t += every) {
      if (t <= from) continue;
      fireTimes++;
      if (!fired.has(t)) missing++;
    }
  }
  const found = rows.flatMap((r) => r.discrepancies ?? []);
  const last = rows.at(-1);
  return {
    cron,
    fireTimes,
    runs: rows.length,
    missing,
    duplicated: rows.length - fired.size,
    // A run that did not complete reported nothing: count it as a discrepancy too.
    discrepancies:
      found.length + rows.filter((r) => r.state !== 'completed' || !r.discrepancies).length,
    firstDiscrepancy: found[0] ?? null,
    final:
      last && Math.round(last.fire_ms) === until.getTime() && last.charges !== null
        ? {
            charges: last.charges,
            refunds: last.refunds ?? 0,
            matched: last.matched ?? 0,
            pending: last.pending ?? 0,
          }
        : null,
  };
}

function reconcileRunsCheck(r: ReconcileFigures): Check {
  return {
    name: 'payment reconciliation: exactly one run per fire time, across the workers',
    ok: r.runs > 0 && r.missing === 0 && r.duplicated === 0 && r.final !== null,
    detail:
      r.final === null
        ? `no reconciliation fired after the last order finished (${r.runs} runs before)`
        : `${r.runs} runs for ${r.fireTimes ?? '?'} fire times of '${r.cron}': ${r.missing} missing, ${r.duplicated} duplicated`,
  };
}

function reconcileFoundCheck(r: ReconcileFigures, orders: number, refunded: number): Check {
  const f = r.final;
  return {
    name: 'payment reconciliation found no discrepancy',
    ok:
      r.runs > 0 &&
      r.discrepancies === 0 &&
      f !== null &&
      f.charges === orders &&
      f.matched === orders &&
      f.refunds === refunded &&
      f.pending === 0,
    detail: `${r.discrepancies} in ${r.runs} runs${r.firstDiscrepancy ? ` (first: ${r.firstDiscrepancy.kind} ${r.firstDiscrepancy.orderId ?? ''} ${r.firstDiscrepancy.detail})` : ''}${f ? `; the last, after every order finished: ${f.matched} of ${f.charges} charges matched for ${orders} orders, ${f.refunds} refunds for ${refunded}, ${f.pending} pending` : ''}`,
  };
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
      'orders held for approval (over $100)',
      `${f.held}: ${f.heldApproved} approved → shipped, ${f.heldTimedOut} timed out → refunded`,
    ],
    ['refunds counted at the Stripe fake', `${f.refunds} (${f.providerRequests.refunds} requests)`],
    [
      'e-mails counted at the SendGrid fake',
      `${f.emails}: ${f.receipts} receipts, ${f.followUps} follow-ups (${f.providerRequests.sendgrid} requests)`,
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
    [
      'payment reconciliations (every fire time)',
      `${f.reconciliation.runs} runs, ${f.reconciliation.discrepancies} ${f.reconciliation.discrepancies === 1 ? 'discrepancy' : 'discrepancies'}${f.reconciliation.final ? `; the last matched ${f.reconciliation.final.matched} charges, ${f.reconciliation.final.refunds} refunds` : ''}`,
    ],
    ['wall time', `${f.wallSeconds.toFixed(1)} s`],
  );
  const lines = [t.toString(), ''];
  for (const c of v.checks) lines.push(`  ${c.ok ? '✓' : '✗'} ${c.name}: ${c.detail}`);
  return lines.join('\n');
}
