/**
 * The stripe crash tests' worker process: stripe-worker.ts spawned through @cyclone/testkit's
 * `spawnWorker` (a real process, stdout lines, real signals, killed by `killAllChildren()` or at
 * exit).
 */
import { type ChildWorker, spawnWorker } from '@cyclone/testkit';

/** Spawns stripe-worker.ts against the fake on `fakePort` and waits for its `READY` line. */
export function spawnStripeWorker(options: {
  databaseUrl: string;
  fakePort: number;
  victim: boolean;
  leaseMs?: number;
}): Promise<ChildWorker> {
  return spawnWorker({
    script: new URL('./stripe-worker.ts', import.meta.url),
    env: {
      DATABASE_URL: options.databaseUrl,
      FAKE_STRIPE_PORT: String(options.fakePort),
      CRASH_VICTIM: options.victim ? '1' : '0',
      CRASH_LEASE_MS: String(options.leaseMs ?? 1000),
      STRIPE_SUPPRESS_NOTICES: 'true',
    },
    readyTimeoutMs: 30_000,
  });
}
