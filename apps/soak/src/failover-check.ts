/**
 * The failovers' part of the report (a pure function of the recorded faults): how many, how
 * long the address led nowhere, the recovery time (kill → the first step completed on the new
 * primary) and how long each new standby took. Its invariant: every failover recovered, within
 * `--max-recovery`. That nothing was lost or done twice across them is what the other
 * invariants check (no run lost, completionTx rows, provider effects).
 */
import type { FaultSummary } from './snapshot.js';

/** The failovers in the report. */
export interface FailoverSummary {
  count: number;
  /** Steps running at the kills, summed. */
  heldSteps: number;
  /** Kill → address on the new primary, worst case (ms). */
  maxDownMs: number | null;
  /** Kill → first step completed on the new primary (ms). */
  recovery: { p50: number | null; max: number | null };
  /** Failovers with no step completed afterwards. */
  unrecovered: number;
  /** The longest rebuild of a synchronous standby (ms). */
  maxStandbyMs: number | null;
}

type Failover = Extract<FaultSummary, { kind: 'failover' }>;

/** Summarises the failovers among `faults` (see the module comment). */
export function summarizeFailovers(faults: readonly FaultSummary[]): FailoverSummary {
  const fs = faults.filter((f): f is Failover => f.kind === 'failover');
  const rec = fs.map((f) => f.recoveryMs).filter((v): v is number => v !== null);
  const sorted = [...rec].sort((a, b) => a - b);
  const max = (vs: number[]) => (vs.length ? Math.max(...vs) : null);
  return {
    count: fs.length,
    heldSteps: fs.reduce((n, f) => n + Math.max(0, f.held), 0),
    maxDownMs: max(fs.map((f) => f.downMs)),
    recovery: {
      p50: sorted.length ? (sorted[Math.floor(sorted.length / 2)] as number) : null,
      max: max(rec),
    },
    unrecovered: fs.length - rec.length,
    maxStandbyMs: max(fs.map((f) => f.standbyMs).filter((v): v is number => v !== null)),
  };
}

/** The failovers that did not recover, or recovered later than `maxRecoveryMs`. */
export function slowFailovers(faults: readonly FaultSummary[], maxRecoveryMs: number): unknown[] {
  return faults
    .filter((f): f is Failover => f.kind === 'failover')
    .filter((f) => f.recoveryMs === null || f.recoveryMs > maxRecoveryMs)
    .map((f) => ({ at: f.at, from: f.from, to: f.to, recoveryMs: f.recoveryMs }));
}
