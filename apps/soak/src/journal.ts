/**
 * What the orchestrator records while the soak runs, for the checker: the runs it submitted (and
 * had confirmed), every fault it injected, the steps each killed or stalled worker held, the
 * handler starts the workers reported, and what its operator loop did.
 */
import type { ProviderFault } from './fakes.js';
import type { Provider } from './workload.js';

export interface SubmittedRun {
  key: string;
  runId: string;
  workflow: 'soak_order' | 'soak_batch';
  /** The order's card declines: its run must end `failed`, at `charge`. */
  declined: boolean;
  at: number;
}

export type FaultRecord =
  | {
      kind: 'pgbouncer';
      /** When PgBouncer was killed, or the command sent. */
      at: number;
      /** SIGKILL and a restart, or the console's RECONNECT (pgbouncer.ts). */
      mode: 'kill' | 'reconnect';
      /** How long PgBouncer was gone (0 for a RECONNECT). */
      downMs: number;
      /** Steps running at the fault (-1: could not be read). */
      held: number;
      /** Workers counted for the recovery (alive and working at the fault). */
      workers: number;
      /** PgBouncer back → every counted worker started a handler again; null until seen. */
      recoveryMs: number | null;
    }
  | { kind: 'kill'; at: number; slot: number; workerId: string; orphans: number }
  | { kind: 'terminate'; at: number; backends: number }
  | { kind: 'pg-restart'; at: number; mode: 'fast' | 'immediate'; downMs: number }
  | {
      kind: 'provider';
      at: number;
      provider: Provider;
      fault: ProviderFault;
      times: number;
      hits: () => number;
    }
  | { kind: 'stall'; at: number; slot: number; workerId: string; ms: number; orphans: number }
  | {
      kind: 'partition';
      /** When the worker's host was cut off. */
      at: number;
      slot: number;
      workerId: string;
      /** How long it stayed cut off. */
      cutMs: number;
      /** Steps it held at the cut. */
      orphans: number;
      /** Cut → every step it held claimed again or ended; null until seen. */
      takeoverMs: number | null;
      /** When it was healed; null until then. */
      healedAt: number | null;
      /** Heal → its first handler start (new work, no restart); null until seen. */
      recoveryMs: number | null;
      /**
       * Why the recovery could not be measured (its process ended, killed or stopped by the
       * soak, within `--max-recovery` of the heal and before any handler start); null otherwise.
       * A partition with neither this nor `recoveryMs` failed.
       */
      unmeasured: string | null;
    }
  | {
      kind: 'failover';
      /** When the primary was killed. */
      at: number;
      /** The old primary and the promoted standby (node names). */
      from: string;
      to: string;
      /** The wait before the promotion, standing for an HA manager's detection. */
      detectionMs: number;
      /** Kill → the address on the new primary. */
      downMs: number;
      /** Steps running at the kill (-1: could not be read). */
      held: number;
      /** Kill → the first step completed on the new primary; null until seen. */
      recoveryMs: number | null;
      /** How long building the new synchronous standby took; null until done. */
      standbyMs: number | null;
    };

/** A step a worker held (running, leased to it) when it was killed or stalled. */
export interface Orphan {
  runId: string;
  node: string;
  attempt: number;
}

/** A worker that died (killed) or stalled, and the steps it held. */
export interface Loss {
  cause: 'kill' | 'stall';
  workerId: string;
  at: number;
  orphans: Orphan[];
}

export interface StartEvent {
  attempt: number;
  at: number;
  workerId: string;
}

export interface OperatorAction {
  at: number;
  runId: string;
  node: string;
  key: string | null;
  provider: Provider | null;
  /** What the error said and what the operator did about it. */
  cause: 'unknown_outcome' | 'definitive_failure';
  decision: 'resolved_succeeded' | 'resolved_not_sent' | 'retried';
}

export class Journal {
  readonly submitted = new Map<string, SubmittedRun>();
  readonly faults: FaultRecord[] = [];
  readonly losses: Loss[] = [];
  /** Handler starts by `${runId}:${node}`. */
  readonly starts = new Map<string, StartEvent[]>();
  /**
   * Each worker's handler start times (Date.now() ms in the worker), in the order they came: one
   * process's IPC messages arrive in the order it sent them.
   */
  readonly startsBy = new Map<string, number[]>();
  readonly operator: OperatorAction[] = [];
  /** Submissions that failed and were tried again (e.g. while PostgreSQL was down). */
  submitRetries = 0;

  recordStart(runId: string, node: string, e: StartEvent): void {
    const k = `${runId}:${node}`;
    const list = this.starts.get(k);
    if (list) list.push(e);
    else this.starts.set(k, [e]);
    const mine = this.startsBy.get(e.workerId);
    if (mine) mine.push(e.at);
    else this.startsBy.set(e.workerId, [e.at]);
  }

  /** The first handler start of `workerId` after `since` (ms), or undefined. */
  firstStartAfter(workerId: string, since: number): number | undefined {
    const mine = this.startsBy.get(workerId) ?? [];
    let first: number | undefined;
    for (let i = mine.length - 1; i >= 0; i--) {
      const at = mine[i] as number;
      if (at <= since) break;
      first = at;
    }
    return first;
  }
}
