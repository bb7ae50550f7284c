/**
 * The partitions' part of the report (a pure function of the recorded faults): how many, how
 * long the hosts were cut off, the takeover (cut → every step the worker held claimed again or
 * ended) and the recovery (heal → the worker's first handler start). Its invariant: every
 * partition was taken over and recovered, each within `--max-recovery`. A recovery that could not
 * be seen for a reason of the soak's own (the worker's process killed or stopped by it within
 * `--max-recovery` of the heal, before any start) is listed as unmeasured with that reason, not
 * as a failure. That nothing was lost or done twice across them is what the other invariants
 * check.
 */
import type { FaultSummary } from './snapshot.js';

/** The partitions in the report. Times in ms. */
export interface PartitionSummary {
  count: number;
  /** Steps the cut-off workers held, summed. */
  heldSteps: number;
  maxCutMs: number | null;
  takeover: { p50: number | null; max: number | null };
  recovery: { p50: number | null; max: number | null };
  /** Partitions whose steps were never taken over, or whose worker never worked again. */
  unfinished: number;
  /** Partitions whose recovery could not be measured, and why (see the module comment). */
  unmeasured: { at: number; workerId: string; reason: string }[];
  /** Each partition as recorded (times in ms; `at` and `healedAt` are Date.now() values). */
  list: Omit<Partition, 'kind'>[];
}

type Partition = Extract<FaultSummary, { kind: 'partition' }>;

const p50 = (vs: number[]) =>
  vs.length ? ([...vs].sort((a, b) => a - b)[Math.floor(vs.length / 2)] as number) : null;
const max = (vs: number[]) => (vs.length ? Math.max(...vs) : null);

/** Summarises the partitions among `faults` (see the module comment). */
export function summarizePartitions(faults: readonly FaultSummary[]): PartitionSummary {
  const ps = faults.filter((f): f is Partition => f.kind === 'partition');
  const takeover = ps.map((f) => f.takeoverMs).filter((v): v is number => v !== null);
  const recovery = ps.map((f) => f.recoveryMs).filter((v): v is number => v !== null);
  return {
    count: ps.length,
    heldSteps: ps.reduce((n, f) => n + f.orphans, 0),
    maxCutMs: max(ps.map((f) => f.cutMs)),
    takeover: { p50: p50(takeover), max: max(takeover) },
    recovery: { p50: p50(recovery), max: max(recovery) },
    unfinished: ps.filter(
      (f) => f.takeoverMs === null || (f.recoveryMs === null && f.unmeasured === null),
    ).length,
    unmeasured: ps.flatMap((f) =>
      f.recoveryMs === null && f.unmeasured !== null
        ? [{ at: f.at, workerId: f.workerId, reason: f.unmeasured }]
        : [],
    ),
    list: ps.map(({ kind: _, ...rest }) => rest),
  };
}

/**
 * The partitions not taken over or not recovered, or either later than `maxRecoveryMs`; an
 * unmeasured recovery (with its reason) is not counted against it.
 */
export function slowPartitions(faults: readonly FaultSummary[], maxRecoveryMs: number): unknown[] {
  return faults
    .filter((f): f is Partition => f.kind === 'partition')
    .filter(
      (f) =>
        f.takeoverMs === null ||
        (f.recoveryMs === null && f.unmeasured === null) ||
        f.takeoverMs > maxRecoveryMs ||
        (f.recoveryMs !== null && f.recoveryMs > maxRecoveryMs),
    )
    .map((f) => ({
      at: f.at,
      workerId: f.workerId,
      cutMs: f.cutMs,
      healedAt: f.healedAt,
      takeoverMs: f.takeoverMs,
      recoveryMs: f.recoveryMs,
    }));
}
