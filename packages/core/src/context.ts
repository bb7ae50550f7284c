/**
 * The handler's `ctx`: what a step's handler knows of its claim, and what it may do with it
 * (open the completion transaction, read upstream outputs, re-check its lease).
 */
import type pg from 'pg';
import type { Client } from './client.js';
import { LeaseLostError } from './errors.js';
import type { Logger } from './logger.js';
import type { ClaimedStep } from './sql/claim.js';
import { isStepHeld } from './sql/fence.js';
import type { SqlScope } from './sql/statement.js';
import type { Json, Tx } from './types.js';

/**
 * The handler's `ctx`. `runId` and `node` identify the step for its whole life, across retries,
 * lease reclaims and operator retries; `attempt` is the fencing token of this claim and is for
 * logs and metrics only, never for idempotency keys (a reclaim changes it).
 */
export interface Context {
  /** The run's id (uuid). */
  readonly runId: string;
  /** The node's name in the workflow. */
  readonly node: string;
  /** 1 on the first claim, +1 on every claim (including lease reclaims and operator retries). */
  readonly attempt: number;
  /** The workflow's name. */
  readonly workflow: string;
  /** The action's name. */
  readonly action: string;
  /**
   * Aborted on the action's timeout (reason: `StepTimeoutError`), on lease loss (reason:
   * `LeaseLostError`) and on a worker's hard stop. Pass it to fetch/SDK calls.
   */
  readonly signal: AbortSignal;
  /**
   * Opens, on first call, the transaction that will also complete the step; later calls return
   * the same one. Writes made on it commit together with the step's `completed` transition, or
   * not at all (rolled back when the handler throws, times out or lost its lease).
   */
  completionTx(): Promise<Tx>;
  /**
   * The output of a completed upstream node (any ancestor in the DAG).
   * @throws Error when `node` is not an ancestor of this node.
   */
  upstream<T = Json>(node: string): T;
  /** A logger bound to runId, node and attempt. */
  readonly log: Logger;
  /** The client of the worker running the step (its pool, schema and operator API). */
  readonly client: Client;
  /**
   * Re-checks this claim's fence in the database: resolves when the step is still `running` at
   * this attempt, so the lease is held.
   * @throws LeaseLostError when it is not (reclaimed, timed out, cancelled).
   */
  assertLease(): Promise<void>;
}

/** The completion transaction as the context uses it (`CompletionTx`). */
export interface ContextTx {
  /** `ctx.completionTx()`. */
  open(): Promise<Tx>;
  /** The open transaction while the attempt lasts, else undefined. */
  current(): Tx | undefined;
}

/** What `makeContext` needs: the claimed step, its node's ancestors and the worker's handles. */
export interface ContextParts {
  step: ClaimedStep;
  /** Every ancestor of the step's node: the nodes `upstream()` may read. */
  ancestors: readonly string[];
  /** The attempt's abort signal, made when the handler first reads `ctx.signal`. */
  readonly signal: AbortSignal;
  /** True once the attempt was aborted. */
  readonly aborted: boolean;
  log: Logger;
  client: Client;
  /** The statements' schema and prepare flag. */
  db: SqlScope;
  /** Where `assertLease()` runs when no completion transaction is open. */
  controlPool: pg.Pool;
  completionTx: ContextTx;
}

/** Makes the `ctx` a handler receives for one claimed step. */
export function makeContext(p: ContextParts): Context {
  const { step } = p;
  return {
    runId: step.run_id,
    node: step.node,
    attempt: step.attempt,
    workflow: step.workflow,
    action: step.action,
    get signal() {
      return p.signal;
    },
    log: p.log,
    client: p.client,
    completionTx: () => p.completionTx.open(),
    upstream<T>(name: string): T {
      if (!p.ancestors.includes(name)) {
        throw new Error(
          `node '${name}' is not upstream of '${step.node}' in workflow '${step.workflow}'`,
        );
      }
      return step.upstream?.[name] as T;
    },
    async assertLease() {
      // On the open transaction if there is one, else on the control pool: never wait for a
      // step-pool connection that handlers holding transactions may all have taken.
      const on: Tx = p.completionTx.current() ?? p.controlPool;
      const held = await isStepHeld(on, p.db, {
        runId: step.run_id,
        node: step.node,
        attempt: step.attempt,
      });
      if (!held || p.aborted) {
        throw new LeaseLostError(step.run_id, step.node, step.attempt);
      }
    },
  };
}
