/**
 * Core's crash-test worker processes: crash-worker.ts spawned through @cyclone/testkit's
 * `spawnWorker` (real processes, stdout lines, real signals, every child tracked and killed by
 * `killAllChildren()` or at exit).
 */
import { type ChildWorker, spawnWorker } from '@cyclone/testkit';

export interface SpawnOptions {
  /** Database of the test file. */
  databaseUrl: string;
  /** Stop at the run's crash point (crash-workflows.ts). Default false. */
  victim?: boolean;
  leaseMs?: number;
  sweepIntervalMs?: number;
  pollIntervalMs?: number;
  /** Name in diagnostics. */
  label?: string;
  /** How long to wait for `READY`. Default 20 s. */
  readyTimeoutMs?: number;
}

/** Spawns crash-worker.ts and waits for its `READY <pid> <workerId>` line. */
export function spawnCrashWorker(options: SpawnOptions): Promise<ChildWorker> {
  return spawnWorker({
    script: new URL('./crash-worker.ts', import.meta.url),
    env: {
      DATABASE_URL: options.databaseUrl,
      CRASH_VICTIM: options.victim ? '1' : '0',
      CRASH_LEASE_MS: String(options.leaseMs ?? 1000),
      CRASH_SWEEP_MS: String(options.sweepIntervalMs ?? 250),
      CRASH_POLL_MS: String(options.pollIntervalMs ?? 100),
    },
    label: options.label ?? (options.victim ? 'victim' : 'rescuer'),
    // The tests compare lease owners with the worker id: it must be there.
    ready: /^READY (\d+) (\S+)$/,
    readyTimeoutMs: options.readyTimeoutMs,
  });
}
