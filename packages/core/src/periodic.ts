/**
 * A background task on a jittered interval, never overlapping itself: the heartbeat and the
 * recovery sweep each run on one.
 */
import type { Logger } from './logger.js';

/** A task started by `every`. */
export interface Periodic {
  /** Schedules no further run; a run in progress finishes on its own. */
  stop(): void;
}

/**
 * Runs `fn` every `ms` milliseconds (± `jitter`, a fraction of `ms`, so that workers started
 * together drift apart), the first time after one interval, until stopped. The next run is
 * scheduled once the last one settled; a rejection is logged and the task goes on.
 */
export function every(ms: number, jitter: number, fn: () => Promise<void>, log: Logger): Periodic {
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  const next = () => ms * (1 + jitter * (Math.random() * 2 - 1));
  const tick = async () => {
    if (stopped) return;
    await fn().catch((err) => log.error({ err: String(err) }, 'background task failed'));
    if (!stopped) timer = setTimeout(tick, next());
  };
  timer = setTimeout(tick, next());
  return {
    stop() {
      stopped = true;
      clearTimeout(timer);
    },
  };
}
