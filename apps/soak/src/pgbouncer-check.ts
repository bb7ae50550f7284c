/**
 * The `pgbouncer` faults' part of the report (a pure function of the recorded faults): how many
 * of each mode, how long PgBouncer was gone, and the recovery (PgBouncer back → every worker that
 * was working started a handler again). Its invariant: every such fault recovered within
 * `--max-recovery`. That nothing was lost or done twice across them is what the other
 * invariants check.
 */
import type { FaultSummary } from './snapshot.js';

/** The `pgbouncer` faults in the report. Times in ms. */
export interface PgBouncerSummary {
  /** PgBouncer SIGKILLed and started again. */
  kills: number;
  /** The console's RECONNECT. */
  reconnects: number;
  /** Steps running at the faults, summed. */
  heldSteps: number;
  maxDownMs: number | null;
  recovery: { p50: number | null; max: number | null };
  /** Faults after which some worker never started a handler again. */
  unrecovered: number;
}

type Fault = Extract<FaultSummary, { kind: 'pgbouncer' }>;

const p50 = (vs: number[]) =>
  vs.length ? ([...vs].sort((a, b) => a - b)[Math.floor(vs.length / 2)] as number) : null;
const max = (vs: number[]) => (vs.length ? Math.max(...vs) : null);

/** Summarises the `pgbouncer` faults among `faults` (see the module comment). */
export function summarizePgBouncerFaults(faults: readonly FaultSummary[]): PgBouncerSummary {
  const fs = faults.filter((f): f is Fault => f.kind === 'pgbouncer');
  const recovery = fs.map((f) => f.recoveryMs).filter((v): v is number => v !== null);
  const kills = fs.filter((f) => f.mode === 'kill');
  return {
    kills: kills.length,
    reconnects: fs.length - kills.length,
    heldSteps: fs.reduce((n, f) => n + Math.max(0, f.held), 0),
    maxDownMs: max(kills.map((f) => f.downMs)),
    recovery: { p50: p50(recovery), max: max(recovery) },
    unrecovered: fs.length - recovery.length,
  };
}

/** The `pgbouncer` faults not recovered, or recovered later than `maxRecoveryMs`. */
export function slowPgBouncerFaults(
  faults: readonly FaultSummary[],
  maxRecoveryMs: number,
): unknown[] {
  return faults
    .filter((f): f is Fault => f.kind === 'pgbouncer')
    .filter((f) => f.recoveryMs === null || f.recoveryMs > maxRecoveryMs)
    .map((f) => ({ at: f.at, mode: f.mode, downMs: f.downMs, recoveryMs: f.recoveryMs }));
}
