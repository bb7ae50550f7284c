/**
 * The invariant checker: a pure function from the end-of-soak `Snapshot` to the report. Each
 * invariant is a named check with the evidence of any violation (the first 20 cases).
 *
 * - runs: every run the load had confirmed exists (none lost); none is still running after the
 *   settle period (none stuck); the only failed runs are the orders whose card declines, and
 *   those all fail;
 * - `completionTx` business rows per (run, node): exactly 1 for a completed node, 0 otherwise;
 * - provider effects per idempotency key (the fakes' counts): at most 1, and exactly 1 for a
 *   completed provider node;
 * - unknown outcomes (a provider call whose outcome its caller did not learn: an ambiguous
 *   error, a call found without an outcome by a later attempt, a call made again under the same
 *   key): each must have ended, and how is reported;
 * - recovery: each step a killed or stalled worker held must have run again (or been committed
 *   by that worker's last in-flight COMMIT); the time from a kill to the step's next start is
 *   reported, and its maximum must stay under `--max-recovery`;
 * - no worker process died on its own, no provider secret is stored or logged, and every
 *   enabled fault kind was injected at least once.
 */
import { type FailoverSummary, slowFailovers, summarizeFailovers } from './failover-check.js';
import { type PartitionSummary, slowPartitions, summarizePartitions } from './partition-check.js';
import {
  type PgBouncerSummary,
  slowPgBouncerFaults,
  summarizePgBouncerFaults,
} from './pgbouncer-check.js';
import type { Snapshot, StepRow } from './snapshot.js';
import { PROVIDER_NODES, type Provider } from './workload.js';

export interface Invariant {
  name: string;
  ok: boolean;
  /** The measured value(s), short. */
  value: string;
  /** Up to 20 violating cases. */
  violations?: unknown[];
}

export interface Percentiles {
  count: number;
  p50: number | null;
  p95: number | null;
  max: number | null;
}

export interface Report {
  ok: boolean;
  seed: number;
  durations: { faultPhaseMs: number; settleMs: number; totalMs: number };
  config: Snapshot['options'];
  runs: {
    asked: number;
    submitted: number;
    unconfirmedSubmissions: number;
    submitRetries: number;
    completed: number;
    failed: number;
    failedByDesign: number;
    failedUnexpectedly: number;
    cancelled: number;
    stuck: number;
    lost: number;
    byWorkflow: Record<string, Record<string, number>>;
  };
  steps: { total: number; completed: number; attempts: number; maxAttempt: number };
  business: { completedNodes: number; rows: number; violations: number };
  effects: {
    providerNodes: number;
    keysWithEffects: number;
    totalEffects: number;
    duplicateKeys: number;
    completedWithoutExactlyOne: number;
    strayKeys: number;
    byProvider: Record<string, { effects: number; requests: number }>;
  };
  unknownOutcomes: {
    total: number;
    open: number;
    byEnding: Record<string, number>;
    byProvider: Record<string, number>;
    cases: { key: string; provider: Provider; ending: string; signals: string[] }[];
  };
  faults: {
    total: number;
    byKind: Record<string, number>;
    provider: Record<string, { injected: number; hits: number }>;
    terminatedBackends: number;
    pgRestarts: { fast: number; immediate: number; maxDownMs: number };
    kills: number;
    stalls: number;
    failovers: FailoverSummary;
    /** The workers' PgBouncer restarted or reconnected (the pgbouncer fault). */
    pgbouncer: PgBouncerSummary;
    /** Workers' hosts cut off from the database (the partition fault). */
    partitions: PartitionSummary;
  };
  recovery: {
    afterKill: Percentiles & { orphans: number; committedByDeadWorker: number; neverRerun: number };
    afterStall: Percentiles & {
      orphans: number;
      completedByStalledWorker: number;
      neverRerun: number;
    };
  };
  operator: { actions: number; byDecision: Record<string, number> };
  workers: { processes: number; unexpectedExits: number };
  secretsFound: number;
  invariants: Invariant[];
}

const UNKNOWN_SIGNS = new Set(['AmbiguousOutcomeError', 'InProgressError', 'UnknownOutcomeError']);

function percentiles(values: number[]): Percentiles {
  if (values.length === 0) return { count: 0, p50: null, p95: null, max: null };
  const s = [...values].sort((a, b) => a - b);
  const at = (q: number) => s[Math.min(s.length - 1, Math.floor(q * s.length))] as number;
  return { count: s.length, p50: at(0.5), p95: at(0.95), max: s[s.length - 1] as number };
}

function bump(o: Record<string, number>, k: string, n = 1): void {
  o[k] = (o[k] ?? 0) + n;
}

function inv(name: string, violations: unknown[], value: string): Invariant {
  return {
    name,
    ok: violations.length === 0,
    value,
    ...(violations.length ? { violations: violations.slice(0, 20) } : {}),
  };
}

/** Checks every invariant of a soak. */
export function check(s: Snapshot): Report {
  const runsById = new Map(s.runs.map((r) => [r.id, r]));
  const stepKey = (runId: string, node: string) => `${runId}:${node}`;
  const steps = new Map(s.steps.map((st) => [stepKey(st.runId, st.node), st]));
  const submittedByRun = new Map(s.submitted.map((r) => [r.runId, r]));

  // --- runs
  const lost = s.submitted.filter((r) => !runsById.has(r.runId));
  const submittedKeys = new Set(s.submitted.map((r) => r.key));
  const unconfirmedInDb = s.runs.filter((r) => r.submitKey && !submittedKeys.has(r.submitKey));
  const byWorkflow: Record<string, Record<string, number>> = {};
  const states: Record<string, number> = {};
  for (const r of s.runs) {
    byWorkflow[r.workflow] ??= {};
    bump(byWorkflow[r.workflow] as Record<string, number>, r.state);
    bump(states, r.state);
  }
  const stuck = s.runs.filter((r) => r.state === 'running');
  const declined = (runId: string) => submittedByRun.get(runId)?.declined ?? false;
  const failedUnexpectedly = s.runs.filter((r) => r.state === 'failed' && !declined(r.id));
  const declinedNotFailed = s.submitted.filter(
    (r) => r.declined && runsById.get(r.runId)?.state !== 'failed',
  );
  const failedByDesign = s.runs.filter((r) => r.state === 'failed' && declined(r.id)).length;
  const reasonFor = (runId: string) =>
    Object.entries(s.leftAlone)
      .filter(([k]) => k.startsWith(`${runId}:`))
      .map(([k, v]) => `${k.slice(runId.length + 1)}: ${v}`);

  // --- business rows
  const rowsByStep = new Map(s.business.map((b) => [stepKey(b.runId, b.node), b.rows]));
  const businessViolations: unknown[] = [];
  let completedNodes = 0;
  for (const st of s.steps) {
    const rows = rowsByStep.get(stepKey(st.runId, st.node)) ?? 0;
    if (st.state === 'completed') completedNodes++;
    const want = st.state === 'completed' ? 1 : 0;
    if (rows !== want) {
      businessViolations.push({ runId: st.runId, node: st.node, state: st.state, rows, want });
    }
  }
  for (const b of s.business) {
    if (!steps.has(stepKey(b.runId, b.node))) {
      businessViolations.push({
        runId: b.runId,
        node: b.node,
        state: 'no such step',
        rows: b.rows,
      });
    }
  }

  // --- provider effects
  const effects = new Map(s.effects.map((e) => [e.key, e]));
  const providerSteps = s.steps.filter((st) => st.node in PROVIDER_NODES);
  const duplicates = s.effects.filter((e) => e.effects > 1);
  const completedWithoutOne = providerSteps
    .filter(
      (st) =>
        st.state === 'completed' && (effects.get(stepKey(st.runId, st.node))?.effects ?? 0) !== 1,
    )
    .map((st) => ({
      key: stepKey(st.runId, st.node),
      effects: effects.get(stepKey(st.runId, st.node))?.effects ?? 0,
    }));
  const stray = s.effects.filter((e) => !steps.has(e.key));
  const byProvider: Record<string, { effects: number; requests: number }> = {};
  for (const e of s.effects) {
    const p = byProvider[e.provider] ?? { effects: 0, requests: 0 };
    byProvider[e.provider] = p;
    p.effects += e.effects;
    p.requests += e.requests;
  }

  // --- unknown outcomes
  const ledger = new Map(s.ledger.map((l) => [l.key, l]));
  const opsByKey = new Map<string, typeof s.operator>();
  for (const a of s.operator) {
    const k = a.key ?? stepKey(a.runId, a.node);
    opsByKey.set(k, [...(opsByKey.get(k) ?? []), a]);
  }
  const unknownCases: Report['unknownOutcomes']['cases'] = [];
  const byEnding: Record<string, number> = {};
  const unknownByProvider: Record<string, number> = {};
  for (const st of providerSteps) {
    const key = stepKey(st.runId, st.node);
    const provider = PROVIDER_NODES[st.node as keyof typeof PROVIDER_NODES];
    const l = ledger.get(key);
    const ops = opsByKey.get(key) ?? [];
    const count = (cls: string) => st.errorClasses.filter((c) => c === cls).length;
    const reCalls = ops.filter((o) => o.decision !== 'resolved_succeeded').length;
    const extraCalls = (l?.calls ?? 0) - 1 - count('NotSentError') - reCalls;
    const signals = [
      ...new Set(st.errorClasses.filter((c) => UNKNOWN_SIGNS.has(c))),
      ...(l?.errorOutcome === 'ambiguous' ? ['ledger: ambiguous'] : []),
      ...(extraCalls > 0 ? [`called again under the same key (${extraCalls}×)`] : []),
      ...ops.map((o) => `operator: ${o.cause} → ${o.decision}`),
    ];
    if (signals.length === 0) continue;
    let ending: string;
    if (st.state !== 'completed') {
      ending =
        st.node === 'charge' && declined(st.runId) && l?.errorCode === 'card_declined'
          ? 'declined card (definitive, by design)'
          : `OPEN (step ${st.state})`;
    } else if (ops.some((o) => o.decision === 'resolved_succeeded')) {
      ending = 'operator found the effect at the provider: resolved succeeded';
    } else if (ops.some((o) => o.decision === 'resolved_not_sent')) {
      ending = 'operator found no effect: resolved not sent, sent again';
    } else if (ops.some((o) => o.decision === 'retried')) {
      ending = 'operator retried a replayed 5xx: new key generation';
    } else if (extraCalls > 0) {
      ending =
        provider === 'stripe'
          ? 'called again under the same key: Stripe replayed it'
          : 'called again under the same key';
    } else {
      ending = 'reconciled without calling again';
    }
    bump(byEnding, ending);
    bump(unknownByProvider, provider);
    unknownCases.push({ key, provider, ending, signals });
  }
  const openUnknown = unknownCases.filter((c) => c.ending.startsWith('OPEN'));

  // --- recovery
  const recovery = (cause: 'kill' | 'stall') => {
    const times: number[] = [];
    let orphans = 0;
    let byLoser = 0;
    const never: unknown[] = [];
    for (const loss of s.losses.filter((l) => l.cause === cause)) {
      for (const o of loss.orphans) {
        orphans++;
        const next = (s.starts[stepKey(o.runId, o.node)] ?? [])
          .filter((e) => e.attempt > o.attempt)
          .sort((a, b) => a.at - b.at)[0];
        if (next) {
          times.push(Math.max(0, next.at - loss.at));
          continue;
        }
        const st = steps.get(stepKey(o.runId, o.node));
        if (st && st.state === 'completed' && st.attempt === o.attempt) byLoser++;
        else if (st && st.state !== 'running' && runsById.get(o.runId)?.state === 'cancelled')
          byLoser++;
        else
          never.push({
            ...o,
            worker: loss.workerId,
            finalState: st?.state,
            finalAttempt: st?.attempt,
          });
      }
    }
    return { times, orphans, byLoser, never };
  };
  const kill = recovery('kill');
  const stall = recovery('stall');
  const killP = percentiles(kill.times);

  // --- faults
  const byKind: Record<string, number> = {};
  const providerFaults: Record<string, { injected: number; hits: number }> = {};
  let terminated = 0;
  const restarts = { fast: 0, immediate: 0, maxDownMs: 0 };
  for (const f of s.faults) {
    bump(byKind, f.kind);
    if (f.kind === 'provider') {
      const name = `${f.provider}/${f.fault}`;
      const p = providerFaults[name] ?? { injected: 0, hits: 0 };
      providerFaults[name] = p;
      p.injected += f.times;
      p.hits += f.hits;
    } else if (f.kind === 'terminate') terminated += f.backends;
    else if (f.kind === 'pg-restart') {
      restarts[f.mode]++;
      restarts.maxDownMs = Math.max(restarts.maxDownMs, f.downMs);
    }
  }
  const missingKinds = s.options.faults.filter((k) => !byKind[k]);

  const byDecision: Record<string, number> = {};
  for (const a of s.operator) bump(byDecision, `${a.cause} → ${a.decision}`);

  const stepList = [...steps.values()];
  const invariants: Invariant[] = [
    inv('no run lost (every confirmed submission exists)', lost, `${lost.length} lost`),
    inv(
      'no run stuck (all terminal after the settle period)',
      stuck.map((r) => ({ runId: r.id, workflow: r.workflow })),
      `${stuck.length} stuck`,
    ),
    inv(
      'no run failed unexpectedly (only declined cards fail)',
      failedUnexpectedly.map((r) => ({ runId: r.id, workflow: r.workflow, why: reasonFor(r.id) })),
      `${failedUnexpectedly.length} unexpected`,
    ),
    inv(
      'every declined order failed',
      declinedNotFailed.map((r) => ({ runId: r.runId, state: runsById.get(r.runId)?.state })),
      `${failedByDesign} failed by design`,
    ),
    inv(
      'completionTx rows: exactly 1 per completed node, 0 otherwise',
      businessViolations,
      `${completedNodes} completed nodes, ${businessViolations.length} violations`,
    ),
    inv(
      'provider effects: at most 1 per key',
      duplicates,
      `max ${Math.max(0, ...s.effects.map((e) => e.effects))} per key`,
    ),
    inv(
      'provider effects: exactly 1 per completed provider node',
      [
        ...completedWithoutOne,
        ...stray.map((e) => ({ key: e.key, effects: e.effects, stray: true })),
      ],
      `${completedWithoutOne.length + stray.length} violations`,
    ),
    inv(
      'every unknown outcome ended',
      openUnknown,
      `${unknownCases.length} unknown outcomes, ${openUnknown.length} open`,
    ),
    inv(
      'every step of a killed or stalled worker ran again',
      [...kill.never, ...stall.never],
      `${kill.orphans + stall.orphans} orphaned steps`,
    ),
    inv(
      `recovery after a kill within ${s.options.maxRecoveryMs} ms`,
      kill.times.filter((t) => t > s.options.maxRecoveryMs),
      `max ${killP.max ?? '-'} ms`,
    ),
    ...(s.options.faults.includes('pgbouncer')
      ? [
          inv(
            `every PgBouncer restart or reconnect recovered (each working worker started a handler again) within ${s.options.maxRecoveryMs} ms`,
            slowPgBouncerFaults(s.faults, s.options.maxRecoveryMs),
            `max ${summarizePgBouncerFaults(s.faults).recovery.max ?? '-'} ms`,
          ),
        ]
      : []),
    ...(s.options.faults.includes('failover')
      ? [
          inv(
            `every failover recovered (a step completed on the new primary) within ${s.options.maxRecoveryMs} ms`,
            slowFailovers(s.faults, s.options.maxRecoveryMs),
            `max ${summarizeFailovers(s.faults).recovery.max ?? '-'} ms`,
          ),
        ]
      : []),
    ...(s.options.faults.includes('partition')
      ? [
          inv(
            `every partition taken over and its worker working again after the heal, each within ${s.options.maxRecoveryMs} ms`,
            slowPartitions(s.faults, s.options.maxRecoveryMs),
            (() => {
              const p = summarizePartitions(s.faults);
              const un = p.unmeasured.length ? `, ${p.unmeasured.length} not measurable` : '';
              return `takeover max ${p.takeover.max ?? '-'} ms, recovery max ${p.recovery.max ?? '-'} ms${un}`;
            })(),
          ),
        ]
      : []),
    inv(
      'no worker process exited on its own',
      s.unexpectedExits,
      `${s.unexpectedExits.length} unexpected exits`,
    ),
    inv('no provider secret stored or logged', s.secrets, `${s.secrets.length} places`),
    inv(
      'every enabled fault kind was injected',
      missingKinds,
      s.options.faults.length
        ? s.options.faults.map((k) => `${k} ${byKind[k] ?? 0}`).join(', ')
        : 'faults off',
    ),
  ];

  const faultPhaseMs = s.faultPhaseEndedAt - s.startedAt;
  return {
    ok: invariants.every((i) => i.ok),
    seed: s.options.seed,
    durations: {
      faultPhaseMs,
      settleMs: s.endedAt - s.faultPhaseEndedAt,
      totalMs: s.endedAt - s.startedAt,
    },
    config: s.options,
    runs: {
      asked: s.asked,
      submitted: s.submitted.length,
      unconfirmedSubmissions: s.asked - s.submitted.length - unconfirmedInDb.length,
      submitRetries: s.submitRetries,
      completed: states.completed ?? 0,
      failed: states.failed ?? 0,
      failedByDesign,
      failedUnexpectedly: failedUnexpectedly.length,
      cancelled: states.cancelled ?? 0,
      stuck: stuck.length,
      lost: lost.length,
      byWorkflow,
    },
    steps: {
      total: stepList.length,
      completed: completedNodes,
      attempts: stepList.reduce((n, st: StepRow) => n + st.attempt, 0),
      maxAttempt: Math.max(0, ...stepList.map((st) => st.attempt)),
    },
    business: {
      completedNodes,
      rows: s.business.reduce((n, b) => n + b.rows, 0),
      violations: businessViolations.length,
    },
    effects: {
      providerNodes: providerSteps.length,
      keysWithEffects: s.effects.filter((e) => e.effects > 0).length,
      totalEffects: s.effects.reduce((n, e) => n + e.effects, 0),
      duplicateKeys: duplicates.length,
      completedWithoutExactlyOne: completedWithoutOne.length,
      strayKeys: stray.length,
      byProvider,
    },
    unknownOutcomes: {
      total: unknownCases.length,
      open: openUnknown.length,
      byEnding,
      byProvider: unknownByProvider,
      cases: unknownCases.slice(0, 500),
    },
    faults: {
      total: s.faults.length,
      byKind,
      provider: providerFaults,
      terminatedBackends: terminated,
      pgRestarts: restarts,
      kills: byKind.kill ?? 0,
      stalls: byKind.stall ?? 0,
      failovers: summarizeFailovers(s.faults),
      pgbouncer: summarizePgBouncerFaults(s.faults),
      partitions: summarizePartitions(s.faults),
    },
    recovery: {
      afterKill: {
        ...killP,
        orphans: kill.orphans,
        committedByDeadWorker: kill.byLoser,
        neverRerun: kill.never.length,
      },
      afterStall: {
        ...percentiles(stall.times),
        orphans: stall.orphans,
        completedByStalledWorker: stall.byLoser,
        neverRerun: stall.never.length,
      },
    },
    operator: { actions: s.operator.length, byDecision },
    workers: { processes: s.workerProcesses, unexpectedExits: s.unexpectedExits.length },
    secretsFound: s.secrets.length,
    invariants,
  };
}
