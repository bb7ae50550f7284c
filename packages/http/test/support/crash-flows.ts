/**
 * The workflow of the crash tests, shared by the test file (the in-process rescuer worker) and
 * the child worker process (http-worker.ts). The handler posts a shipment through
 * `idempotentFetch`, then, in the victim process, tells the parent and never returns: the parent
 * SIGKILLs it after the call and before the step's completion.
 */
import { type Context, newAction, newWorkflow } from '@cyclone/core';
import { type HttpUnknownPolicy, idempotentFetch } from '../../src/index.js';

export interface CrashConfig {
  /** The fake API's origin in this process. */
  baseUrl: string;
  /** Tells the parent something (a stdout line in the child). */
  emit: (line: string) => void;
  /** True in the process that must stop after the call. */
  victim: boolean;
}

let config: CrashConfig | undefined;

/** Sets this process's configuration; call before any worker starts. */
export function configureCrash(c: CrashConfig): void {
  config = c;
}

function cfg(): CrashConfig {
  if (!config) throw new Error('crash-flows: configureCrash() was not called in this process');
  return config;
}

/** The run's input: the unknown-outcome policy of the call. */
export interface CrashInput {
  onUnknown: Exclude<HttpUnknownPolicy, (...args: never[]) => unknown>;
}

const ship = newAction(
  'http_crash_ship',
  async (ctx: Context, input: CrashInput) => {
    const c = cfg();
    c.emit(`CALLING ${ctx.runId} ${ctx.attempt}`);
    const res = await idempotentFetch(ctx, { onUnknown: input.onUnknown })(
      `${c.baseUrl}/v1/shipments`,
      {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ orderId: 'o-crash', parcels: 1 }),
      },
    );
    const shipment = ((await res.json()) as { id: string }).id;
    c.emit(`CALLED ${ctx.runId} ${ctx.attempt} ${shipment}`);
    if (c.victim && ctx.attempt === 1) return new Promise<never>(() => {});
    return { shipment, attempt: ctx.attempt, replayed: res.headers.get('cyclone-replayed') };
  },
  { maxAttempts: 5, backoff: () => 100 },
);

/** One node, `ship`. */
export const CrashShip = newWorkflow<CrashInput>('http_crash', {
  nodes: { ship: { action: ship } },
});
