/**
 * The chaos: every few seconds, SIGKILL a worker that is in the middle of steps (it holds
 * leases), and start a replacement. The killed worker's steps stay `running` until their leases
 * expire; a live worker's recovery sweep then makes them claimable again. What a victim still
 * held is counted once its database sessions are gone: a COMMIT it sent just before dying is
 * still carried out by the server, so counting any earlier would count a step it completed.
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

/** A step a killed worker held when it died: its run, node and the attempt it had claimed. */
export interface HeldStep {
  runId: string;
  node: string;
  attempt: number;
  /** The killed worker's id (the lease owner the sweep names). */
  owner: string;
}

export interface Chaos {
  /** Worker ids of the workers killed while they held steps (what maxKills counts). */
  readonly killed: string[];
  /** Worker ids of the workers killed just after their steps had finished (they held none). */
  readonly missed: string[];
  /** Every step the killed workers still held when their sessions ended. */
  readonly held: HeldStep[];
  /** Set when a replacement worker could not be started: the chaos stopped. */
  readonly error: Error | undefined;
  /** Stops killing; resolves once a kill in progress (and its replacement) is done. */
  stop(): Promise<void>;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export function startChaos(o: ChaosOptions): Chaos {
  const killed: string[] = [];
  const missed: string[] = [];
  const held: HeldStep[] = [];
  let error: Error | undefined;
  let stopped = false;
  let wake: (() => void) | undefined;

  /** Leases held per worker (running steps whose lease owner it is): the live ones, or `only`. */
  const leasesHeld = async (): Promise<Map<string, number>> => {
    const { rows } = await o.client.pool.query<{ owner: string; n: number }>(
      `SELECT lease_owner AS owner, count(*)::int AS n FROM cyclone.cyclone_steps
       WHERE state = 'running' AND lease_owner = ANY($1::text[]) GROUP BY lease_owner`,
      [o.workers.map((w) => w.workerId)],
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
      // once the server has ended its sessions, with whatever they had sent carried out.
      await sessionsGone(o.client, victim.appName);
      const steps = await stepsHeld(o.client, victim.workerId);
      held.push(...steps);
      lastMissed = steps.length === 0;
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
      o.onKill(victim, steps.length, replacement);
    }
  })();

  return {
    killed,
    missed,
    held,
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

/**
 * Waits (up to 10 s) until the server has no session left with `appName`, the application_name
 * of a killed worker's connections: a session ends only after the statements it had received
 * (a COMMIT sent just before the SIGKILL) are done.
 */
async function sessionsGone(client: Client, appName: string): Promise<void> {
  for (const deadline = Date.now() + 10_000; Date.now() < deadline; ) {
    const { rows } = await client.pool
      .query<{ n: number }>(
        'SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1',
        [appName],
      )
      .catch(() => ({ rows: [{ n: 1 }] }));
    if (rows[0]?.n === 0) return;
    await sleep(20);
  }
}

/** The steps `owner` holds: running under its lease. */
async function stepsHeld(client: Client, owner: string): Promise<HeldStep[]> {
  const { rows } = await client.pool.query<{ run_id: string; node: string; attempt: number }>(
    `SELECT run_id, node, attempt FROM cyclone.cyclone_steps
     WHERE state = 'running' AND lease_owner = $1`,
    [owner],
  );
  return rows.map((r) => ({ runId: r.run_id, node: r.node, attempt: r.attempt, owner }));
}
