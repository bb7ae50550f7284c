/**
 * Flow control on the worker's side (docs/flow-control.md): the limits of the worker's actions,
 * the resolution of limit keys, and the limited claim of each limited action, which the claim
 * loop (`claim.ts`) runs next to the plain claim.
 */
import type pg from 'pg';
import { withConnection } from './db.js';
import type { Workflow } from './definitions.js';
import { describeError, errorEntry } from './error-entry.js';
import { LimitKeyError } from './errors.js';
import { mapInput } from './execute-step.js';
import { isStorableText } from './json.js';
import { type ActionLimits, type LimitKey, MAX_LIMIT_KEY_BYTES } from './limits.js';
import { recordedLimits } from './list-limits.js';
import type { Logger } from './logger.js';
import type { ClaimedStep } from './sql/claim.js';
import {
  ACTION_LOCK_WAIT_MS,
  claimLimited,
  discardKeyStep,
  isLockWaitTimeout,
  type LimitValues,
  type ResolvedKeys,
  recordLimits,
  selectKeysPending,
  setKeys,
} from './sql/flow.js';
import type { SqlScope } from './sql/statement.js';

/** Steps whose keys one resolution pass computes at most. */
const RESOLVE_BATCH = 200;

/** One limited action of the worker. */
interface LimitedAction {
  readonly name: string;
  readonly limits: ActionLimits;
  readonly values: LimitValues;
  /** Its fairness key's limit per key, if any (the most candidates one key gives a claim). */
  readonly perKeyCap: number | undefined;
}

/** The limited actions among `workflows`' nodes, by action name (the first definition wins). */
export function limitedActions(workflows: Iterable<Workflow<unknown>>): Map<string, ActionLimits> {
  const out = new Map<string, ActionLimits>();
  for (const wf of workflows) {
    for (const n of wf.nodes) {
      const l = n.action.limits as ActionLimits | undefined;
      if (l && !out.has(n.action.name)) out.set(n.action.name, l);
    }
  }
  return out;
}

/** What the flow control needs of its worker. */
export interface FlowParts {
  controlPool: pg.Pool;
  db: SqlScope;
  workflows: ReadonlyMap<string, Workflow<unknown>>;
  log: Logger;
  workerId: string;
  leaseMs: number;
  /** Tells the claim loop the connection of a statement in flight (for stop's cancel). */
  setClaimConn(c: pg.ClientBase | undefined): void;
}

/** The worker's limited actions, their key resolution and their claims. */
export class FlowControl {
  private readonly actions: LimitedAction[];
  private readonly keyedNames: string[];
  private readonly workflowNames: string[];
  private readonly nodeKeys: string[];
  /** Per action, the fairness key this worker served last. */
  private readonly cursors = new Map<string, string>();
  /** Rotates which action the next claim serves first. */
  private turn = 0;
  /** When (this process's clock, ms) a step held back by a rate limit may start; or undefined. */
  private rateWakeAt: number | undefined;

  constructor(private readonly parts: FlowParts) {
    const limited = limitedActions(parts.workflows.values());
    this.actions = [...limited].map(([name, limits]) => ({
      name,
      limits,
      values: {
        concurrency: limits.concurrency ?? null,
        keyedConcurrency: limits.keyedConcurrency?.limit ?? null,
        rate: limits.rate ?? null,
        keyedRate: limits.keyedRate
          ? { limit: limits.keyedRate.limit, periodMs: limits.keyedRate.periodMs }
          : null,
      },
      perKeyCap: limits.keyedConcurrency?.limit ?? limits.keyedRate?.limit,
    }));
    this.keyedNames = this.actions
      .filter((a) => a.limits.keyedConcurrency || a.limits.keyedRate)
      .map((a) => a.name);
    this.workflowNames = [...parts.workflows.keys()];
    this.nodeKeys = [...parts.workflows.values()].flatMap((wf) =>
      wf.nodes.map((n) => `${wf.name}/${n.name}`),
    );
  }

  /** True when the worker has an action with a limit. */
  get active(): boolean {
    return this.actions.length > 0;
  }

  /**
   * Records the worker's limits in `cyclone_limits` (for `listLimits` in processes without the
   * definitions): those of its actions replaced by its own. Errors are logged, not thrown.
   */
  async record(): Promise<void> {
    const all = limitedActions(this.parts.workflows.values());
    const names = [
      ...new Set(
        [...this.parts.workflows.values()].flatMap((wf) => wf.nodes.map((n) => n.action.name)),
      ),
    ];
    const rows = [...all].flatMap(([name, l]) => recordedLimits(name, l));
    try {
      await withConnection(this.parts.controlPool, (c) =>
        recordLimits(c, this.parts.db, { actions: names, limits: rows }),
      );
    } catch (err) {
      this.parts.log.warn({ err: String(err) }, 'could not record the limits of the actions');
    }
  }

  /**
   * How long the claim loop may wait before a step held back by a rate limit can start (ms), or
   * undefined when none is known to be.
   */
  waitMs(): number | undefined {
    if (this.rateWakeAt === undefined) return undefined;
    return Math.max(1, Math.ceil(this.rateWakeAt - Date.now()) + 1);
  }

  /**
   * Resolves the keys of due steps, then claims up to `want` steps of the limited actions, each
   * in its own transaction under the action's lock, starting with another action each time.
   * @param withoutUpstream leave the upstream outputs out (after a data-limit failure).
   * @returns the leased steps.
   */
  async claim(want: number, withoutUpstream = false): Promise<ClaimedStep[]> {
    if (this.keyedNames.length > 0) await this.resolveKeys();
    const out: ClaimedStep[] = [];
    let wakeAt: number | undefined;
    const n = this.actions.length;
    const first = this.turn++ % n;
    for (let i = 0; i < n && out.length < want; i++) {
      const action = this.actions[(first + i) % n] as LimitedAction;
      const left = want - out.length;
      const perKey = Math.max(1, Math.min(left, action.perKeyCap ?? left));
      let r: Awaited<ReturnType<typeof claimLimited>>;
      try {
        r = await withConnection(this.parts.controlPool, async (c) => {
          this.parts.setClaimConn(c);
          try {
            return await claimLimited(c, this.parts.db, this.lockName(action.name), {
              action: action.name,
              workflows: this.workflowNames,
              nodeKeys: this.nodeKeys,
              want: left,
              workerId: this.parts.workerId,
              leaseMs: this.parts.leaseMs,
              limits: action.values,
              cursor: this.cursors.get(action.name) ?? '',
              maxKeys: Math.min(256, Math.max(16, Math.ceil((4 * left) / perKey))),
              perKey,
              withoutUpstream,
            });
          } finally {
            this.parts.setClaimConn(undefined);
          }
        });
      } catch (err) {
        if (!isLockWaitTimeout(err)) throw err;
        // Another session holds the action's lock too long: this action waits for the next round.
        this.parts.log.debug({ action: action.name }, 'limited claim skipped: action lock busy');
        const at = Date.now() + ACTION_LOCK_WAIT_MS;
        wakeAt = wakeAt === undefined ? at : Math.min(wakeAt, at);
        continue;
      }
      this.cursors.set(action.name, r.cursor);
      if (r.nextInMs !== undefined) {
        const at = Date.now() + r.nextInMs;
        wakeAt = wakeAt === undefined ? at : Math.min(wakeAt, at);
      }
      out.push(...r.steps);
    }
    this.rateWakeAt = wakeAt;
    return out;
  }

  /** The advisory lock's name of `action`: the schema and the action. */
  private lockName(action: string): string {
    return `cyclone.flow:${this.parts.db.q}:${action}`;
  }

  /**
   * Computes the limit keys of due steps of the worker's keyed actions and stores them (the
   * steps become claimable by the limited claim); a step whose key function throws or returns no
   * usable key is discarded with a `LimitKeyError`. Errors of the pass are logged; the claim goes
   * on.
   */
  private async resolveKeys(): Promise<void> {
    const { parts } = this;
    try {
      const rows = await selectKeysPending(parts.controlPool, parts.db, {
        actions: this.keyedNames,
        workflows: this.workflowNames,
        nodeKeys: this.nodeKeys,
        limit: RESOLVE_BATCH,
      });
      if (rows.length === 0) return;
      const resolved: ResolvedKeys[] = [];
      for (const row of rows) {
        const keys = this.keysOf(row);
        if (keys instanceof LimitKeyError) {
          const entry = JSON.stringify(errorEntry(keys, row.attempt, 'limit_key_invalid'));
          const r = await discardKeyStep(parts.controlPool, parts.db, {
            runId: row.run_id,
            node: row.node,
            entry,
          });
          parts.log.warn(
            { runId: row.run_id, node: row.node, err: keys.message, runState: r?.run_state },
            'step discarded: its limit key cannot be computed',
          );
          continue;
        }
        resolved.push({ runId: row.run_id, node: row.node, ...keys });
      }
      if (resolved.length > 0) await setKeys(parts.controlPool, parts.db, resolved);
    } catch (err) {
      parts.log.warn({ err: String(err) }, 'could not resolve limit keys; trying again');
    }
  }

  /**
   * The keys of one step, or the `LimitKeyError` that discards it. When the node's condition is
   * false or throws, or its input cannot be mapped, the step gets no key: it starts (within the
   * limits without a key) only to be skipped or discarded as any such step is.
   */
  private keysOf(
    row: ClaimedStep,
  ): { concurrencyKey: string | null; rateLimitKey: string | null } | LimitKeyError {
    const none = { concurrencyKey: null, rateLimitKey: null };
    const node = this.parts.workflows.get(row.workflow)?.nodeByName.get(row.node);
    const limits = node?.action.limits as ActionLimits | undefined;
    if (!node || !limits) return none;
    if (node.when) {
      try {
        if (node.when(row.run_input, row.upstream ?? {}) !== true) return none;
      } catch {
        return none;
      }
    }
    let input: unknown;
    try {
      input = mapInput(node, row);
    } catch {
      return none;
    }
    try {
      return {
        concurrencyKey: computeKey('concurrency', limits.keyedConcurrency?.key, input),
        rateLimitKey: computeKey('rateLimit', limits.keyedRate?.key, input),
      };
    } catch (err) {
      if (LimitKeyError.isInstance(err)) return err;
      throw err;
    }
  }
}

/**
 * A limit key computed from a step's input: a non-empty storable string of at most
 * `MAX_LIMIT_KEY_BYTES`, or null for none (no key function, or it returned null/undefined).
 * @throws LimitKeyError when the function throws or returns anything else.
 */
export function computeKey(
  which: 'concurrency' | 'rateLimit',
  fn: LimitKey<unknown> | undefined,
  input: unknown,
): string | null {
  if (!fn) return null;
  let key: unknown;
  try {
    key = fn(input);
  } catch (err) {
    throw new LimitKeyError(which, `the ${which} key function threw: ${describeError(err)}`, {
      cause: err,
    });
  }
  if (key === null || key === undefined) return null;
  if (
    typeof key !== 'string' ||
    key.length === 0 ||
    !isStorableText(key) ||
    Buffer.byteLength(key) > MAX_LIMIT_KEY_BYTES
  ) {
    const got =
      typeof key === 'string'
        ? key.length === 0
          ? 'an empty string'
          : `a string that is not storable or over ${MAX_LIMIT_KEY_BYTES} bytes`
        : `${typeof key} ${describeError(key).replace(/^non-Error value thrown: /, '')}`;
    throw new LimitKeyError(
      which,
      `the ${which} key function must return a non-empty string of at most ${MAX_LIMIT_KEY_BYTES} UTF-8 bytes without NUL or lone surrogates (or null for no key), got ${got}`,
    );
  }
  return key;
}
