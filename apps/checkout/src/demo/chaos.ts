/**
 * The chaos: every few seconds, SIGKILL a worker that is in the middle of steps (it holds
 * leases), and start a replacement. The killed worker's steps stay `running` until their leases
 * expire; a live worker's recovery sweep then makes them claimable again.
 */
import type { Client } from '@cyclone/core';
import type { WorkerChild } from './processes.js';

export interface ChaosOptions {
  client: Client;
  /** The live workers; the chaos replaces killed ones in this array. */
  workers: WorkerChild[];
  /** Starts a replacement worker. */
  startWorker: () => Promise<WorkerChild>;
  everyMs: number;
  /**
   * Most kills that strand steps. A kill that lands just after the victim's steps finished (they
   * take milliseconds) proves nothing about recovery and does not count: the chaos kills again.
   */
  maxKills: number;
  /** Told about each kill, with the steps the victim still held when it died (0: a miss). */
  onKill: (victim: WorkerChild, held: number, replacement: WorkerChild) => void;
}

export interface Chaos {
  /** Worker ids of the workers killed while they held steps (what maxKills counts). */
  readonly killed: string[];
  /** Worker ids of the workers killed just after their steps had finished (they held none). */
  readonly missed: string[];
  /** Set when a replacement worker could not be started: the chaos stopped. */
  readonly error: Error | undefined;
  /** Stops killing; resolves once a kill in progress (and its replacement) is done. */
  stop(): Promise<void>;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export function startChaos(o: ChaosOptions): Chaos {
  const killed: string[] = [];
  const missed: string[] = [];
  let error: Error | undefined;
  let stopped = false;
  let wake: (() => void) | undefined;

  /** Leases held per worker (running steps whose lease owner it is): the live ones, or `only`. */
  const leasesHeld = async (only?: string): Promise<Map<string, number>> => {
    const { rows } = await o.client.pool.query<{ owner: string; n: number }>(
      `SELECT lease_owner AS owner, count(*)::int AS n FROM cyclone.cyclone_steps
       WHERE state = 'running' AND lease_owner = ANY($1::text[]) GROUP BY lease_owner`,
      [only === undefined ? o.workers.map((w) => w.workerId) : [only]],
    );
    return new Map(rows.map((r) => [r.owner, r.n]));
  };

  const loop = (async () => {
    let lastKill = Date.now();
    let lastMissed = false;
    for (let round = 0; !stopped && killed.length < o.maxKills; round++) {
      // The first kill at once (a short run must see one: 60 orders are done in a second or two),
      // then 0.7–1.3 × everyMs apart, counted from the previous kill (starting its replacement
      // takes a second or two); again at once after a kill that missed.
      const pause = round === 0 || lastMissed ? 0 : o.everyMs * (0.7 + Math.random() * 0.6);
      await new Promise<void>((r) => {
        wake = r;
        setTimeout(r, Math.max(0, lastKill + pause - Date.now()));
      });
      // Wait (up to 3 s, looking every 20 ms: steps run for milliseconds) for a worker that
      // holds leases: killing an idle one proves nothing.
      let victim: WorkerChild | undefined;
      for (let i = 0; i < 150 && !stopped && !victim; i++) {
        const leases = await leasesHeld().catch(() => new Map<string, number>());
        const busy = o.workers.filter((w) => (leases.get(w.workerId) ?? 0) > 0);
        victim = busy[Math.floor(Math.random() * busy.length)];
        if (!victim) await sleep(20);
      }
      if (stopped || !victim) continue;
      await victim.kill();
      lastKill = Date.now();
      // What it still held when it died: those steps wait for their leases to expire. Counted
      // after the kill, since its steps may have finished between the look and the SIGKILL.
      const held = (await leasesHeld(victim.workerId).catch(() => new Map())).get(
        victim.workerId,
      ) as number | undefined;
      lastMissed = !held;
      (lastMissed ? missed : killed).push(victim.workerId);
      let replacement: WorkerChild | undefined;
      for (let i = 0; !replacement; i++) {
        try {
          replacement = await o.startWorker();
        } catch (err) {
          if (i >= 2) {
            error = err as Error;
            return;
          }
          await sleep(500);
        }
      }
      o.workers[o.workers.indexOf(victim)] = replacement;
      o.onKill(victim, held ?? 0, replacement);
    }
  })();

  return {
    killed,
    missed,
    get error() {
      return error;
    },
    async stop() {
      stopped = true;
      wake?.();
      await loop;
    },
  };
}
