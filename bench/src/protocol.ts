/**
 * The harness ↔ worker child protocol. The harness passes a `ChildSpec` as JSON in the
 * `BENCH_CHILD` environment variable; the child writes lines starting with `@` on stdout and
 * reads commands (`EXIT`, `MARK`) on stdin.
 *
 * - `@READY`: the worker runs.
 * - `@T0`: the first handler started (drain: the measured window opens).
 * - `@DONE <DrainResult json>`: drain finished (or hit its time cap).
 * - `@LAT <ns>`: latency mode: a handler started `ns` after the payload's `t` (CLOCK_MONOTONIC).
 * - `@STARTED`: victim mode: the job is claimed and its handler hangs.
 * - `@RECOVERED <ns>`: rescuer mode: a handler started at CLOCK_MONOTONIC `ns`.
 * - `@MARKED`: answer to `MARK` (drain mode): the measured window (statements, CPU) restarted.
 *   `STOP` (drain mode) ends the drain at once: `@DONE` follows with the jobs done so far.
 * - `@ERR <message>`: fatal error; the child exits with code 1.
 */
import type { StatementStat } from './query-counter.js';
import type { SystemName, WorkerSpec, Workload } from './systems/types.js';

export type ChildMode = 'drain' | 'latency' | 'victim' | 'rescuer';

export interface ChildSpec extends WorkerSpec {
  system: SystemName;
  mode: ChildMode;
  workload: Workload;
  /** drain: jobs (steps) to complete. */
  expected: number;
  /** drain: give up (and report the rate so far) this long after the worker started. */
  capMs: number;
  /**
   * drain: only `STOP` (or the cap) ends the drain, so the child waits for it instead of polling
   * its worker's count every 2 ms, which costs about 15 ms of CPU a second in each process.
   */
  untilStop?: boolean;
}

export interface DrainResult {
  /** First handler start → last completion known committed, ms. */
  ms: number;
  /** When the last completion was known committed: CLOCK_MONOTONIC ns, as a decimal string. */
  endNs: string;
  /** Jobs (steps) completed in that window. */
  jobs: number;
  /** True when the time cap ended the run before all jobs were done. */
  capped: boolean;
  /** Child CPU (user + system) in the window, ms. */
  cpuMs: number;
  /** Peak resident set size of the child process, MiB. */
  rssMiB: number;
  /** Statements sent in the window (query-counter.ts). */
  statements: number;
  top: StatementStat[];
}
