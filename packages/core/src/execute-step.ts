/**
 * One claimed step → its `Outcome`: the node's input mapped and validated, the handler raced
 * against its timeout, its lease and the worker's stop, the output encoded. Nothing here writes
 * to the database; `completion.ts` records the outcome.
 */
import type { Context } from './context.js';
import type { NodeDef, Workflow } from './definitions.js';
import { describeError } from './error-entry.js';
import {
  InputValidationError,
  isNonRetryable,
  LeaseLostError,
  MAX_DELAY_MS,
  PayloadError,
  SnoozeError,
  StepTimeoutError,
  zodIssues,
} from './errors.js';
import { encodePayload } from './json.js';
import type { ClaimedStep } from './sql/claim.js';
import type { StepErrorKind } from './types.js';

/**
 * How an attempt ended, as the completion records it: one variant per transition. A new
 * transition is a new variant here and a new case in `completion.ts` (its switch is exhaustive).
 */
export type Outcome = Completed | Retryable | Discarded | LeaseLost | Snoozed | Skipped;

/** The handler returned: complete the step with `output`. */
export interface Completed {
  readonly kind: 'completed';
  /** The output as JSON text, already checked against the payload limit. */
  readonly output: string;
}

/** The attempt failed: retry after the backoff, or discard once the attempts are used up. */
export interface Retryable {
  readonly kind: 'retryable';
  readonly errorKind: StepErrorKind;
  readonly error: unknown;
  /** Give the attempt back: it was cut short by something that is not the handler's doing. */
  readonly refundAttempt: boolean;
  /** Delay before the next attempt instead of the action's backoff (ms). */
  readonly delayMs: number | undefined;
}

/** The attempt failed in a way another attempt cannot mend: discard the step. */
export interface Discarded {
  readonly kind: 'discarded';
  readonly errorKind: StepErrorKind;
  readonly error: unknown;
}

/** The node's condition (`when`) was false: end it `skipped`, its handler not run. */
export interface Skipped {
  readonly kind: 'skipped';
}

/** The handler asked to run again later (`SnoozeError`): no attempt used, no error entry. */
export interface Snoozed {
  readonly kind: 'snoozed';
  /** How long to wait, ms. */
  readonly delayMs: number;
  /**
   * The `code` of the SnoozeError (`SNOOZE`, or a subclass's, such as a rate-limit wait's);
   * `WAIT` for a wait node parked until its signal or deadline.
   */
  readonly code: string;
}

/** The lease was lost while the handler ran: the step belongs to another claim; record nothing. */
export interface LeaseLost {
  readonly kind: 'lease_lost';
}

/** Constructors of the outcomes, one per transition. */
export const Outcome = {
  completed: (output: string): Completed => ({ kind: 'completed', output }),
  retryable: (
    errorKind: StepErrorKind,
    error: unknown,
    options: { refundAttempt?: boolean; delayMs?: number } = {},
  ): Retryable => ({
    kind: 'retryable',
    errorKind,
    error,
    refundAttempt: options.refundAttempt ?? false,
    delayMs: options.delayMs,
  }),
  discarded: (errorKind: StepErrorKind, error: unknown): Discarded => ({
    kind: 'discarded',
    errorKind,
    error,
  }),
  leaseLost: (): LeaseLost => ({ kind: 'lease_lost' }),
  snoozed: (delayMs: number, code = 'SNOOZE'): Snoozed => ({ kind: 'snoozed', delayMs, code }),
  skipped: (): Skipped => ({ kind: 'skipped' }),
  /** A failure that is retryable unless `nonRetryable`. */
  failed: (
    errorKind: StepErrorKind,
    error: unknown,
    nonRetryable: boolean,
  ): Retryable | Discarded =>
    nonRetryable ? Outcome.discarded(errorKind, error) : Outcome.retryable(errorKind, error),
} as const;

/** The outcome of a handler that returned nothing (`undefined` or `null`): its output is null. */
const NULL_OUTPUT: Completed = Object.freeze(Outcome.completed('null'));

/** What `executeStep` needs besides the step. */
export interface ExecuteParts {
  /** The worker's definition of the step's workflow. */
  workflow: Workflow<unknown>;
  /** The attempt's abort (a `StepAbort`): lease loss or a hard stop; the step's timeout too. */
  abort(reason: unknown): void;
  /** The handler's promise raced against the abort (`StepAbort.race`). */
  race(ran: Promise<unknown>): Promise<Settled>;
  /** Makes the handler's `ctx` for the step's node. */
  context(node: NodeDef<unknown>): Context;
  /** Largest output stored (bytes). */
  maxPayloadBytes: number;
  /** Called once the handler settled (or will not run): the step's claim slot may be reused. */
  markFinishing(): void;
}

/** How the handler's race ended: its value or error, or the abort's reason. */
export type Settled =
  | { ok: true; value: unknown }
  | { ok: false; error: unknown; aborted: boolean };

/** The abort whose race promise is being made: one executor for all, not a closure each. */
let racing: StepAbort | undefined;
function keepRaceResolve(resolve: (s: Settled) => void): void {
  (racing as StepAbort).won = resolve;
}

/**
 * The abort of one attempt (timeout, lease loss, hard stop), with its `AbortSignal` made only
 * when the handler reads `ctx.signal`: an `AbortController` is an EventTarget, and making one per
 * step was a measurable part of the worker's CPU and garbage per step, while most handlers never
 * look at it. The first reason wins, as with `AbortController.abort`.
 */
export class StepAbort {
  private controller: AbortController | undefined;
  private why: unknown;
  private fired = false;
  /** Settles the race in flight (`race`), if any; whoever comes first clears it. */
  won: ((s: Settled) => void) | undefined = undefined;

  /** The signal handed to the handler (`ctx.signal`), aborted already if the attempt was. */
  get signal(): AbortSignal {
    if (this.controller === undefined) {
      this.controller = new AbortController();
      if (this.fired) this.controller.abort(this.why);
    }
    return this.controller.signal;
  }

  /** True once `abort` was called. */
  get aborted(): boolean {
    return this.fired;
  }

  /** Aborts with `reason`; later calls do nothing. */
  abort(reason: unknown): void {
    if (this.fired) return;
    this.fired = true;
    this.why = reason;
    this.controller?.abort(reason);
    this.settle({ ok: false, error: reason, aborted: true });
  }

  /**
   * Races the handler's promise against the abort: settles with whichever comes first (the
   * abort at once if it came already). One race per attempt.
   */
  race(ran: Promise<unknown>): Promise<Settled> {
    if (this.fired) return Promise.resolve({ ok: false, error: this.why, aborted: true });
    racing = this;
    const p = new Promise<Settled>(keepRaceResolve);
    racing = undefined;
    ran.then(
      (value) => this.settle({ ok: true, value }),
      (error) => this.settle({ ok: false, error, aborted: false }),
    );
    return p;
  }

  private settle(s: Settled): void {
    const w = this.won;
    this.won = undefined;
    w?.(s);
  }
}

/** Runs one claimed step's handler and says how the attempt ended; never rejects. */
export async function executeStep(row: ClaimedStep, p: ExecuteParts): Promise<Outcome> {
  const node = p.workflow.nodeByName.get(row.node);
  if (!node) {
    p.markFinishing();
    return Outcome.discarded(
      'input_invalid',
      new Error(`this worker's definition of workflow '${row.workflow}' has no node '${row.node}'`),
    );
  }
  if (node.when) {
    let run: boolean;
    try {
      run = node.when(row.run_input, row.upstream ?? {}) === true;
    } catch (err) {
      p.markFinishing();
      return Outcome.discarded(
        'condition_error',
        new Error(`the condition (when) of node '${row.node}' threw: ${describeError(err)}`),
      );
    }
    if (!run) {
      p.markFinishing();
      return Outcome.skipped();
    }
  }
  const ctx = p.context(node);

  let input: unknown;
  try {
    input = mapInput(node, row);
  } catch (err) {
    p.markFinishing();
    return Outcome.discarded('input_invalid', err);
  }

  // The handler, raced against the abort (timeout, lease loss, hard stop): one promise settled
  // by whichever comes first.
  const ac = p;
  const timeoutMs = node.action.timeoutMs;
  const timer = timeoutMs
    ? setTimeout(() => ac.abort(new StepTimeoutError(timeoutMs)), timeoutMs)
    : undefined;
  // Called here rather than in an async wrapper (one promise and its thenable hops fewer per
  // step); a synchronous throw counts as a rejection, as it would in an async function.
  let ran: Promise<unknown>;
  try {
    ran = Promise.resolve(node.action.handler(ctx, input));
  } catch (error) {
    ran = Promise.reject(error);
  }
  const settled = await ac.race(ran);
  clearTimeout(timer);
  p.markFinishing();

  if (!settled.ok) {
    const error = settled.error;
    if (LeaseLostError.isInstance(error)) return Outcome.leaseLost();
    if (!settled.aborted && SnoozeError.isInstance(error)) return snooze(node, row, error);
    if (settled.aborted && !StepTimeoutError.isInstance(error)) {
      // The worker's stop cut the attempt short: given back, and retried at once elsewhere.
      return Outcome.retryable('worker_stopped', error, { refundAttempt: true, delayMs: 0 });
    }
    const kind = StepTimeoutError.isInstance(error)
      ? 'timeout'
      : isNonRetryable(error)
        ? 'non_retryable'
        : 'error';
    return Outcome.failed(kind, error, isNonRetryable(error));
  }

  // No output (most handlers): one shared outcome, nothing encoded or measured.
  const value = settled.value;
  if ((value === undefined || value === null) && p.maxPayloadBytes >= NULL_OUTPUT.output.length) {
    return NULL_OUTPUT;
  }
  try {
    return Outcome.completed(
      encodePayload(
        value === undefined ? null : value,
        p.maxPayloadBytes,
        `the output of node '${row.node}'`,
      ).text,
    );
  } catch (err) {
    const error =
      err instanceof PayloadError
        ? new PayloadError(
            `the handler's output cannot be stored: ${err.message.replace(/ at \S+$/, '')}`,
            err.path,
          )
        : err;
    return Outcome.discarded('output_invalid', error);
  }
}

/**
 * A snooze, or the step discarded when it has snoozed `maxSnoozes` times already, or when the
 * delay is not one (a `SnoozeError` of another copy of the package is checked again here).
 */
function snooze(node: NodeDef<unknown>, row: ClaimedStep, error: SnoozeError): Outcome {
  const { delayMs } = error;
  if (!(typeof delayMs === 'number' && delayMs >= 0 && delayMs <= MAX_DELAY_MS)) {
    return Outcome.retryable('error', new Error(`SnoozeError with an invalid delay: ${delayMs}`));
  }
  const max = node.action.maxSnoozes;
  if (row.snoozes >= max) {
    return Outcome.discarded(
      'snooze_limit',
      new Error(
        `the step snoozed ${row.snoozes} times, its action's maxSnoozes (${max}); a further snooze discards it`,
      ),
    );
  }
  // A wait node parks until its signal or deadline: a wait, not the handler's own snooze.
  return Outcome.snoozed(delayMs, node.waitFor !== undefined ? 'WAIT' : String(error.code));
}

/** The node's input: the mapping of run input and upstream outputs, validated by the action. */
export function mapInput(node: NodeDef<unknown>, row: ClaimedStep): unknown {
  let mapped: unknown;
  try {
    mapped = node.input ? node.input(row.run_input, row.upstream ?? {}) : row.run_input;
  } catch (err) {
    throw new InputValidationError(
      row.workflow,
      [{ path: [], message: `input mapping threw: ${describeError(err)}` }],
      row.node,
    );
  }
  const schema = node.action.inputSchema;
  if (!schema) return mapped;
  const r = schema.safeParse(mapped);
  if (!r.success) throw new InputValidationError(row.workflow, zodIssues(r.error.issues), row.node);
  return r.data;
}
