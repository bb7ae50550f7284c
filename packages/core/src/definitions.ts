/**
 * Workflow and action definitions (ARCHITECTURE.md § Submission: definitions are validated when
 * defined). Nothing here touches the database.
 */
import type { ZodType } from 'zod';
import type { Client } from './client.js';
import type { Context } from './context.js';
import { MAX_TIMER_MS } from './db.js';
import { MAX_DELAY_MS, SnoozeError, WorkflowDefinitionError } from './errors.js';
import {
  type ActionLimits,
  type ConcurrencyLimit,
  type LimitKey,
  MAX_LIMIT,
  type RateLimit,
} from './limits.js';
import { isSignalName, MAX_SIGNAL_NAME_LENGTH } from './signal-name.js';
import { resolveWait } from './sql/signals.js';
import type {
  DebouncedSubmitResult,
  DebounceOptions,
  Json,
  SubmitOnceResult,
  SubmitOptions,
  SubmitResult,
} from './types.js';

/** Backoff policy: the delay in ms before attempt `attempt + 1`, given the failed `attempt`. */
export type Backoff = (attempt: number) => number;

/** Options of `newAction`. */
export interface ActionOptions<I> {
  /** Validates the node's (mapped) input. A failing input discards the step (non-retryable). */
  input?: ZodType<I>;
  /**
   * Wall-clock limit of one attempt in ms (at most 2³¹ − 1, Node's timer limit); aborts
   * `ctx.signal` and fails the attempt.
   */
  timeout?: number;
  /** Attempts before the step is discarded. Default 25. */
  maxAttempts?: number;
  /** Delay in ms after a failed attempt. Default: attempt⁴ seconds with ±25 % jitter, capped at 1 h. */
  backoff?: Backoff;
  /**
   * Snoozes (`SnoozeError`) a step of this action may take; one more discards it with an error
   * saying so. Default 1,000.
   */
  maxSnoozes?: number;
  /**
   * At most `limit` steps of this action hold a lease at once, across every worker; with `key`,
   * at most `limit` per key. An array gives several limits, every one of which must allow a
   * start: at most one without a key and one with a key (docs/flow-control.md).
   */
  concurrency?: ConcurrencyLimit<I> | readonly ConcurrencyLimit<I>[];
  /**
   * At most `limit` starts (claims) of this action in any `periodMs` window, across every worker;
   * with `key`, per key. An array as for `concurrency`: at most one without and one with a key.
   */
  rateLimit?: RateLimit<I> | readonly RateLimit<I>[];
}

/** An action: a named handler with its options. Made by `newAction`. */
export interface Action<I = unknown, O = unknown> {
  readonly kind: 'action';
  readonly name: string;
  readonly handler: (ctx: Context, input: I) => O | Promise<O>;
  readonly inputSchema: ZodType<I> | undefined;
  readonly timeoutMs: number | undefined;
  readonly maxAttempts: number;
  readonly backoff: Backoff;
  readonly maxSnoozes: number;
  /** Its concurrency and rate limits; undefined when it has none. */
  readonly limits: ActionLimits | undefined;
}

/** Default number of attempts of a step (API.md). */
export const DEFAULT_MAX_ATTEMPTS = 25;

/**
 * The most attempts an action or node may allow: a step's attempts are a 32-bit integer that a
 * snooze and an operator's retry raise further, so a million (years of retries at the default
 * backoff's one-hour cap) leaves them room.
 */
export const MAX_MAX_ATTEMPTS = 1_000_000;

/** Default number of snoozes a step may take (`ActionOptions.maxSnoozes`). */
export const DEFAULT_MAX_SNOOZES = 1000;

/** Cap of the default backoff: 1 hour in ms. */
export const DEFAULT_BACKOFF_CAP_MS = 3_600_000;

/**
 * The default backoff: attempt⁴ seconds (1 s, 16 s, 81 s, 256 s, …) with ±25 % jitter, capped
 * at one hour. The quartic curve follows the API contract (API.md § Action options).
 */
export const defaultBackoff: Backoff = (attempt) => {
  const base = Math.min(attempt ** 4 * 1000, DEFAULT_BACKOFF_CAP_MS);
  const jitter = base * 0.25 * (Math.random() * 2 - 1);
  return Math.max(0, Math.round(base + jitter));
};

/** Names of nodes, workflows and actions: a letter or `_`, then letters, digits, `_` or `-`; ≤ 63 chars. */
const NAME = /^[A-Za-z_][A-Za-z0-9_-]{0,62}$/;

function checkName(kind: string, owner: string, name: unknown): asserts name is string {
  if (typeof name !== 'string' || !NAME.test(name)) {
    throw new WorkflowDefinitionError(
      owner,
      `${kind} name ${JSON.stringify(name)} is not a plain identifier (a letter or _, then letters, digits, _ or -, at most 63 characters)`,
      kind === 'action' ? 'action' : 'workflow',
    );
  }
}

/** True for a `maxAttempts` Cyclone can store: an integer from 1 to `MAX_MAX_ATTEMPTS`. */
function isAttemptCount(v: unknown): v is number {
  return typeof v === 'number' && Number.isInteger(v) && v >= 1 && v <= MAX_MAX_ATTEMPTS;
}

/**
 * Defines an action: a named handler and its options.
 * @param name plain identifier (see `NAME`), unique per worker.
 * @param handler `(ctx, input) => output`; the output must be JSON-serialisable.
 * @throws WorkflowDefinitionError on a bad name or option.
 */
export function newAction<I = unknown, O = unknown>(
  name: string,
  handler: (ctx: Context, input: I) => O | Promise<O>,
  options: ActionOptions<I> = {},
): Action<I, O> {
  checkName('action', String(name), name);
  const bad = (message: string) => new WorkflowDefinitionError(name, message, 'action');
  if (typeof handler !== 'function') throw bad('handler must be a function');
  const maxAttempts = options.maxAttempts ?? DEFAULT_MAX_ATTEMPTS;
  if (!isAttemptCount(maxAttempts)) {
    throw bad(
      `maxAttempts must be an integer from 1 to ${MAX_MAX_ATTEMPTS}, got ${String(maxAttempts)}`,
    );
  }
  if (
    options.timeout !== undefined &&
    !(Number.isInteger(options.timeout) && options.timeout > 0 && options.timeout <= MAX_TIMER_MS)
  ) {
    throw bad(
      `timeout must be a positive integer of at most ${MAX_TIMER_MS} (ms), got ${options.timeout}`,
    );
  }
  const maxSnoozes = options.maxSnoozes ?? DEFAULT_MAX_SNOOZES;
  if (!Number.isInteger(maxSnoozes) || maxSnoozes < 0) {
    throw bad(`maxSnoozes must be an integer ≥ 0, got ${String(options.maxSnoozes)}`);
  }
  return Object.freeze({
    kind: 'action' as const,
    name,
    handler,
    inputSchema: options.input,
    timeoutMs: options.timeout,
    maxAttempts,
    backoff: options.backoff ?? defaultBackoff,
    maxSnoozes,
    limits: actionLimits(name, options),
  });
}

/**
 * The normalised limits of an action's options, or undefined when it has none.
 * @throws WorkflowDefinitionError for a limit or period that is not an integer from 1 to
 *   `MAX_LIMIT`, a key that is not a function, an unknown field, or two limits of one kind both
 *   with (or both without) a key.
 */
function actionLimits<I>(name: string, options: ActionOptions<I>): ActionLimits | undefined {
  const bad = (message: string) => new WorkflowDefinitionError(name, message, 'action');
  const list = <T>(field: string, v: T | readonly T[] | undefined): T[] => {
    if (v === undefined) return [];
    const items = Array.isArray(v) ? [...(v as readonly T[])] : [v as T];
    for (const item of items) {
      if (item === null || typeof item !== 'object' || Array.isArray(item)) {
        throw bad(`${field} must be an object or an array of objects, got ${String(item)}`);
      }
    }
    return items;
  };
  const positive = (what: string, v: unknown): number => {
    if (!(typeof v === 'number' && Number.isInteger(v) && v >= 1 && v <= MAX_LIMIT)) {
      throw bad(`${what} must be an integer from 1 to ${MAX_LIMIT}, got ${String(v)}`);
    }
    return v;
  };
  const keyOf = (what: string, v: unknown): LimitKey<unknown> | undefined => {
    if (v === undefined) return undefined;
    if (typeof v !== 'function') throw bad(`${what}.key must be a function (input) => string`);
    return v as LimitKey<unknown>;
  };
  let concurrency: number | undefined;
  let keyedConcurrency: ActionLimits['keyedConcurrency'];
  for (const c of list('concurrency', options.concurrency)) {
    for (const f of Object.keys(c)) {
      if (f !== 'limit' && f !== 'key') throw bad(`concurrency has no option '${f}'`);
    }
    const limit = positive('concurrency.limit', c.limit);
    const key = keyOf('concurrency', c.key);
    const twice = () =>
      bad(
        `concurrency has two limits ${key ? 'with' : 'without'} a key; give at most one with and one without (a step stores one concurrency key)`,
      );
    if (key) {
      if (keyedConcurrency) throw twice();
      keyedConcurrency = Object.freeze({ limit, key });
    } else {
      if (concurrency !== undefined) throw twice();
      concurrency = limit;
    }
  }
  let rate: ActionLimits['rate'];
  let keyedRate: ActionLimits['keyedRate'];
  for (const r of list('rateLimit', options.rateLimit)) {
    for (const f of Object.keys(r)) {
      if (f !== 'limit' && f !== 'key' && f !== 'periodMs')
        throw bad(`rateLimit has no option '${f}'`);
    }
    const limit = positive('rateLimit.limit', r.limit);
    const periodMs = positive('rateLimit.periodMs', r.periodMs);
    const key = keyOf('rateLimit', r.key);
    const twice = () =>
      bad(
        `rateLimit has two limits ${key ? 'with' : 'without'} a key; give at most one with and one without (a step stores one rate-limit key)`,
      );
    if (key) {
      if (keyedRate) throw twice();
      keyedRate = Object.freeze({ limit, periodMs, key });
    } else {
      if (rate) throw twice();
      rate = Object.freeze({ limit, periodMs });
    }
  }
  if (concurrency === undefined && !keyedConcurrency && !rate && !keyedRate) return undefined;
  return Object.freeze({ concurrency, keyedConcurrency, rate, keyedRate });
}

/** Maps the run's input and the upstream outputs (keyed by node) to an action's input. */
export type InputMapper<RI> = (run: RI, upstream: Record<string, Json>) => unknown;

/**
 * A node's condition: evaluated when the node is about to run, with the run's input and the
 * outputs of its completed upstream nodes. False ends the node `skipped` (done, for its
 * downstream nodes and for the run); a throw discards it with an error saying so.
 */
export type NodeCondition<RI> = (run: RI, upstream: Record<string, Json>) => boolean;

/** One node of a workflow: an action node, or a wait node (`waitFor`, no action). */
export type NodeSpec<RI> = ActionNodeSpec<RI> | WaitNodeSpec<RI>;

/**
 * A wait node: no handler and no worker slot while it waits. It completes with the payload of
 * the run's signal `waitFor` (`client.signal`) as its output, or with `{ timedOut: true }` when
 * `timeoutMs` passes first; a signal sent before the node was reached is delivered when it is.
 */
export interface WaitNodeSpec<RI> {
  /** The signal's name: 1 to 200 characters, no NUL or lone surrogate. */
  waitFor: string;
  /** Upstream nodes that must complete first. */
  after?: readonly string[];
  /** How long to wait once the node is reached, ms (0 to `MAX_DELAY_MS`); default: no limit. */
  timeoutMs?: number;
  /** See `NodeCondition`. */
  when?: NodeCondition<RI>;
  action?: never;
}

/** A node that runs an action. */
export interface ActionNodeSpec<RI> {
  // biome-ignore lint/suspicious/noExplicitAny: any action fits a node; its input is mapped at run time
  action: Action<any, any>;
  /** See `NodeCondition`. */
  when?: NodeCondition<RI>;
  waitFor?: never;
  /** Upstream nodes that must complete first. */
  after?: readonly string[];
  /** Input mapping; default: the run's input as is. */
  input?: InputMapper<RI>;
  /** Overrides the action's `maxAttempts` for this node. */
  maxAttempts?: number;
  /**
   * A durable timer: the node becomes claimable this many ms after its last upstream node
   * completed (for a root node, after the run's start), by PostgreSQL's clock. 0 to
   * `MAX_DELAY_MS`; default 0.
   */
  delayMs?: number;
}

/** Every field a node spec may have, as validation reads it (a `NodeSpec` is one). */
interface LooseNodeSpec<RI> {
  // biome-ignore lint/suspicious/noExplicitAny: see NodeSpec
  action?: Action<any, any>;
  waitFor?: string;
  after?: readonly string[];
  input?: InputMapper<RI>;
  maxAttempts?: number;
  delayMs?: number;
  timeoutMs?: number;
  when?: NodeCondition<RI>;
}

/**
 * Checks a wait node: a signal name, an optional timeout, and nothing of an action node's.
 * @throws WorkflowDefinitionError naming the node and what is wrong.
 */
function checkWaitNode<RI>(workflow: string, n: string, s: LooseNodeSpec<RI>): void {
  const bad = (message: string) =>
    new WorkflowDefinitionError(workflow, `wait node '${n}': ${message}`);
  if (!isSignalName(s.waitFor)) {
    throw bad(
      `waitFor must be a signal name of 1 to ${MAX_SIGNAL_NAME_LENGTH} characters without NUL or lone surrogates, got ${JSON.stringify(s.waitFor)}`,
    );
  }
  for (const field of ['action', 'input', 'maxAttempts', 'delayMs'] as const) {
    if (s[field] !== undefined) throw bad(`a wait node has no ${field} (it runs no handler)`);
  }
  const t = s.timeoutMs;
  if (
    t !== undefined &&
    !(typeof t === 'number' && Number.isFinite(t) && t >= 0 && t <= MAX_DELAY_MS)
  ) {
    throw bad(`timeoutMs must be a number of ms from 0 to ${MAX_DELAY_MS}, got ${String(t)}`);
  }
}

/**
 * The action of every wait node, run when the node is reached (after its condition, if any),
 * at its signal and at its deadline: the signal's payload when it came by the deadline; else,
 * before the deadline, the node parks (a snooze that is not counted) until the deadline or the
 * signal; else `{ timedOut: true }`. Not a user action: its name cannot be one (`$` is not
 * allowed).
 */
const WaitAction: Action<unknown, Json> = Object.freeze({
  kind: 'action' as const,
  name: '$wait',
  handler: async (ctx: Context) => {
    // On the step's completion transaction: the lock taken here holds until the outcome commits.
    const tx = await ctx.completionTx();
    const r = await resolveWait(tx, ctx.client.db, { runId: ctx.runId, node: ctx.node });
    if (r.delivered) return r.payload;
    if (r.due_in_ms === null) throw new SnoozeError(MAX_DELAY_MS);
    if (r.due_in_ms > 0) throw new SnoozeError(Math.min(MAX_DELAY_MS, Math.ceil(r.due_in_ms)));
    return { timedOut: true };
  },
  inputSchema: undefined,
  timeoutMs: undefined,
  maxAttempts: DEFAULT_MAX_ATTEMPTS,
  backoff: defaultBackoff,
  maxSnoozes: DEFAULT_MAX_SNOOZES,
  limits: undefined,
});

/** The compiled form of a node, with its place in the DAG. */
export interface NodeDef<RI> {
  readonly name: string;
  // biome-ignore lint/suspicious/noExplicitAny: see NodeSpec
  readonly action: Action<any, any>;
  /** Direct upstream nodes. */
  readonly after: readonly string[];
  /** Every ancestor (transitive upstream), sorted. */
  readonly ancestors: readonly string[];
  /** Direct downstream nodes. */
  readonly downstream: readonly string[];
  readonly input: InputMapper<RI> | undefined;
  readonly maxAttempts: number;
  /** The node's timer, ms (0: none). */
  readonly delayMs: number;
  /** See `NodeCondition`; undefined: always runs. */
  readonly when: NodeCondition<RI> | undefined;
  /** A wait node's signal name; undefined for an action node. */
  readonly waitFor: string | undefined;
  /** A wait node's timeout, ms; undefined: none. */
  readonly waitTimeoutMs: number | undefined;
}

/** A workflow definition: a validated DAG. Made by `newWorkflow`. */
export interface Workflow<RI = unknown> {
  readonly kind: 'workflow';
  readonly name: string;
  readonly inputSchema: ZodType<RI> | undefined;
  /** Nodes in a topological order. */
  readonly nodes: readonly NodeDef<RI>[];
  readonly nodeByName: ReadonlyMap<string, NodeDef<RI>>;
  /**
   * `client.submit(this, input, options)`. Generic rather than overloaded as `Client.submit` is:
   * overloads here would make TypeScript compare two `Workflow` types member by member.
   */
  submit<O extends SubmitOptions = SubmitOptions>(
    client: Client,
    input: RI,
    options?: O,
  ): Promise<O extends { debounce: DebounceOptions } ? DebouncedSubmitResult : SubmitResult>;
  /** `client.submitOnce(this, key, input, options)`. */
  submitOnce(
    client: Client,
    key: string,
    input: RI,
    options?: SubmitOptions,
  ): Promise<SubmitOnceResult>;
}

/** Options of `newWorkflow`. */
export interface WorkflowSpec<RI> {
  /** Validates the run's input at submit; a failure writes nothing. */
  input?: ZodType<RI>;
  nodes: Record<string, NodeSpec<RI>>;
}

/**
 * Defines a workflow: a DAG of named nodes, each running an action.
 * @throws WorkflowDefinitionError on an empty workflow, a node name that is not a plain
 *   identifier, an unknown or duplicate dependency, a self-dependency or a cycle (the message
 *   names the cycle's nodes).
 */
export function newWorkflow<RI = unknown>(name: string, spec: WorkflowSpec<RI>): Workflow<RI> {
  checkName('workflow', String(name), name);
  if (!spec || typeof spec !== 'object' || !spec.nodes || typeof spec.nodes !== 'object') {
    throw new WorkflowDefinitionError(name, 'spec.nodes must be an object of nodes');
  }
  const names = Object.keys(spec.nodes);
  if (names.length === 0)
    throw new WorkflowDefinitionError(name, 'a workflow needs at least one node');
  for (const n of names) {
    checkName('node', name, n);
    const s = spec.nodes[n] as LooseNodeSpec<RI> | undefined;
    if (s && typeof s === 'object' && s.waitFor !== undefined) {
      checkWaitNode(name, n, s);
    } else if (
      !s ||
      typeof s !== 'object' ||
      !s.action ||
      s.action.kind !== 'action' ||
      typeof s.action.handler !== 'function' ||
      typeof s.action.name !== 'string'
    ) {
      throw new WorkflowDefinitionError(
        name,
        `node '${n}' needs an action made by newAction, or waitFor (a wait node)`,
      );
    }
    if (s.when !== undefined && typeof s.when !== 'function') {
      throw new WorkflowDefinitionError(
        name,
        `node '${n}': when must be a function (run, upstream) => boolean`,
      );
    }
    const after = s.after ?? [];
    if (!Array.isArray(after))
      throw new WorkflowDefinitionError(name, `node '${n}': after must be an array`);
    const seen = new Set<string>();
    for (const dep of after) {
      if (dep === n) throw new WorkflowDefinitionError(name, `node '${n}' depends on itself`);
      if (!Object.hasOwn(spec.nodes, dep)) {
        throw new WorkflowDefinitionError(name, `node '${n}' depends on unknown node '${dep}'`);
      }
      if (seen.has(dep))
        throw new WorkflowDefinitionError(name, `node '${n}' lists '${dep}' twice in after`);
      seen.add(dep);
    }
    if (s.input !== undefined && typeof s.input !== 'function') {
      throw new WorkflowDefinitionError(
        name,
        `node '${n}': input must be a function (run, upstream) => input`,
      );
    }
    if (s.maxAttempts !== undefined && !isAttemptCount(s.maxAttempts)) {
      throw new WorkflowDefinitionError(
        name,
        `node '${n}': maxAttempts must be an integer from 1 to ${MAX_MAX_ATTEMPTS}, got ${String(s.maxAttempts)}`,
      );
    }
    // Only a wait node reads it; on an action node it would be ignored without a word.
    if (s.waitFor === undefined && s.timeoutMs !== undefined) {
      throw new WorkflowDefinitionError(
        name,
        `node '${n}': timeoutMs is a wait node's option (with waitFor); an action's time limit is newAction's timeout`,
      );
    }
    if (
      s.delayMs !== undefined &&
      !(
        typeof s.delayMs === 'number' &&
        Number.isFinite(s.delayMs) &&
        s.delayMs >= 0 &&
        s.delayMs <= MAX_DELAY_MS
      )
    ) {
      throw new WorkflowDefinitionError(
        name,
        `node '${n}': delayMs must be a number of ms from 0 to ${MAX_DELAY_MS} (10 years), got ${String(s.delayMs)}`,
      );
    }
  }

  // Kahn's algorithm gives a topological order; what is left over lies on or behind a cycle.
  const indegree = new Map(names.map((n) => [n, (spec.nodes[n]?.after ?? []).length]));
  const children = new Map<string, string[]>(names.map((n) => [n, []]));
  for (const n of names) for (const dep of spec.nodes[n]?.after ?? []) children.get(dep)?.push(n);
  const order: string[] = [];
  const ready = names.filter((n) => indegree.get(n) === 0);
  while (ready.length) {
    const n = ready.shift() as string;
    order.push(n);
    for (const c of children.get(n) ?? []) {
      const d = (indegree.get(c) ?? 0) - 1;
      indegree.set(c, d);
      if (d === 0) ready.push(c);
    }
  }
  if (order.length !== names.length) {
    throw new WorkflowDefinitionError(
      name,
      `the nodes contain a cycle: ${findCycle(spec.nodes).join(' → ')}`,
    );
  }

  const ancestors = new Map<string, Set<string>>();
  for (const n of order) {
    const set = new Set<string>();
    for (const dep of spec.nodes[n]?.after ?? []) {
      set.add(dep);
      for (const a of ancestors.get(dep) ?? []) set.add(a);
    }
    ancestors.set(n, set);
  }
  const nodes: NodeDef<RI>[] = order.map((n) => {
    const s = spec.nodes[n] as LooseNodeSpec<RI>;
    return Object.freeze({
      name: n,
      action: s.waitFor !== undefined ? WaitAction : (s.action as Action),
      after: Object.freeze([...(s.after ?? [])]),
      ancestors: Object.freeze([...(ancestors.get(n) ?? [])].sort()),
      downstream: Object.freeze([...(children.get(n) ?? [])]),
      input: s.input,
      maxAttempts: s.maxAttempts ?? s.action?.maxAttempts ?? DEFAULT_MAX_ATTEMPTS,
      delayMs: Math.ceil(s.delayMs ?? 0),
      when: s.when,
      waitFor: s.waitFor,
      waitTimeoutMs:
        s.waitFor !== undefined && s.timeoutMs !== undefined ? Math.ceil(s.timeoutMs) : undefined,
    });
  });
  const workflow: Workflow<RI> = {
    kind: 'workflow',
    name,
    inputSchema: spec.input,
    nodes: Object.freeze(nodes),
    nodeByName: new Map(nodes.map((n) => [n.name, n])),
    // One implementation for every options type: client.submit answers `debounced` when asked to.
    submit: ((client: Client, input: RI, options?: SubmitOptions) =>
      client.submit(workflow, input, options)) as Workflow<RI>['submit'],
    submitOnce: (client, key, input, options) => client.submitOnce(workflow, key, input, options),
  };
  return Object.freeze(workflow);
}

function findCycle<RI>(nodes: Record<string, NodeSpec<RI>>): string[] {
  const state = new Map<string, 'visiting' | 'done'>();
  const stack: string[] = [];
  const visit = (n: string): string[] | undefined => {
    state.set(n, 'visiting');
    stack.push(n);
    for (const dep of nodes[n]?.after ?? []) {
      if (state.get(dep) === 'visiting') return [...stack.slice(stack.indexOf(dep)), dep];
      if (!state.has(dep)) {
        const found = visit(dep);
        if (found) return found;
      }
    }
    stack.pop();
    state.set(n, 'done');
    return undefined;
  };
  for (const n of Object.keys(nodes)) {
    if (!state.has(n)) {
      const found = visit(n);
      if (found) return found.reverse();
    }
  }
  return [];
}
