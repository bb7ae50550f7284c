/**
 * What the orchestrator and its worker child processes say to each other over the IPC channel
 * (`child_process.fork`), and the environment a worker is started with.
 */

/** Worker → orchestrator. */
export type WorkerMessage =
  | { t: 'ready'; workerId: string; pid: number }
  /** A handler started (any attempt), on this worker. `at` is Date.now() of the worker. */
  | { t: 'start'; runId: string; node: string; attempt: number; at: number }
  /** The event loop was blocked from `from` to `to` (Date.now()), on request. */
  | { t: 'blocked'; from: number; to: number };

/** Orchestrator → worker. */
export type OrchestratorMessage =
  /** Block the event loop for `ms` (a busy loop: timers, heartbeats and I/O all wait). */
  | { t: 'block'; ms: number }
  /** Stop gracefully (worker.stop) and exit 0. */
  | { t: 'stop' };

/** The environment of a worker process (all strings). */
export interface WorkerEnv {
  SOAK_DATABASE_URL: string;
  SOAK_WORKER_INDEX: string;
  SOAK_LEASE_MS: string;
  SOAK_CONCURRENCY: string;
  SOAK_SWEEP_MS: string;
  SOAK_POLL_MS: string;
  SOAK_STRIPE_URL: string;
  SOAK_STRIPE_KEY: string;
  SOAK_SENDGRID_URL: string;
  SOAK_SENDGRID_KEY: string;
  SOAK_TWILIO_URL: string;
  SOAK_TWILIO_SID: string;
  SOAK_TWILIO_TOKEN: string;
  SOAK_PROVIDER_TIMEOUT_MS: string;
  SOAK_QUIET_PERIOD_MS: string;
  /** '1': through PgBouncer, with its settings (pgbouncer.ts). */
  SOAK_PGBOUNCER?: string;
}
