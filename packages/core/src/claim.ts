/**
 * The claim loop: free slots → `claimSteps` → each claimed step started (executed, then its
 * outcome recorded), then a wait for a NOTIFY, a freed slot or the poll interval.
 */
import type pg from 'pg';
import { cancelStatement } from './cancel.js';
import type { Client } from './client.js';
import type { Attempt, Completer, CompletionCounters } from './completion.js';
import { CompletionTx } from './completion-tx.js';
import { type Context, type ContextParts, type ContextTx, makeContext } from './context.js';
import { isLimitExceeded, withConnection, withTransaction } from './db.js';
import type { Backoff, NodeDef, Workflow } from './definitions.js';
import { describeError } from './error-entry.js';
import { LeaseLostError } from './errors.js';
import { type ExecuteParts, executeStep, Outcome, StepAbort } from './execute-step.js';
import { FlowControl } from './flow.js';
import type { Logger } from './logger.js';
import type { Recorded } from './recorded.js';
import type { SharedClaim } from './shared-claim.js';
import {
  type ClaimedStep,
  claimSteps,
  claimStepsWithoutUpstream,
  nextDueIn,
  selectUpstream,
} from './sql/claim.js';
import type { SqlScope } from './sql/statement.js';
import type { WorkerTelemetry } from './telemetry.js';
import type { Json, Tx } from './types.js';

/** What the worker keeps of a claimed step until its outcome is recorded. */
export interface StepHandle {
  readonly runId: string;
  readonly node: string;
  readonly attempt: number;
  /** Settles when the step's outcome is recorded (or given up). Never rejects. */
  readonly done: Promise<void>;
  /** True once the handler settled: the heartbeat still extends it, but never aborts it. */
  readonly finishing: boolean;
  /** The heartbeat found the lease lost: abort `ctx.signal` with `LeaseLostError`. */
  leaseLost(): void;
  /** Hard stop: abort `ctx.signal` with `reason`. */
  abort(reason: Error): void;
}

/** The worker's counters the claim loop and its steps move (`WorkerStats`). */
export interface ClaimCounters extends CompletionCounters {
  claimed: number;
  /** Claims made (`WorkerStats.claims`). */
  claims: number;
}

/** The longest a busy worker's free slots wait to be claimed together (ms; `gatherMs`). */
const GATHER_MS = 20;

/** Configuration of the claim loop, validated by the worker. Durations in ms. */
export interface ClaimConfig {
  workerId: string;
  leaseMs: number;
  /** Handlers run at once. */
  concurrency: number;
  /** Most steps one claim statement takes. */
  batchSize: number;
  /** Wait between claims when no NOTIFY arrives. */
  pollIntervalMs: number;
}

/** What the claim loop needs of its worker. */
export interface ClaimParts {
  /** The control pool: claims, and cancelling a claim that hangs. */
  controlPool: pg.Pool;
  /** The step pool: completion transactions. */
  pool: pg.Pool;
  db: SqlScope;
  /** Handed to handlers as `ctx.client`; its payload limit applies to outputs. */
  client: Client;
  workflows: ReadonlyMap<string, Workflow<unknown>>;
  log: Logger;
  counters: ClaimCounters;
  completer: Completer;
  /**
   * The worker's in-flight steps: each started step is added, and removed once recorded. By the
   * step itself, so that two attempts of one node (an older one whose lease this worker lost, and
   * its re-claim) are both kept, and no key is made per step.
   */
  inflight: Set<StepHandle>;
  /** Spans and metrics; undefined when no OpenTelemetry SDK is registered. */
  telemetry: WorkerTelemetry | undefined;
  /** False once the worker stops: the loop ends after its current claim. */
  isRunning(): boolean;
  /**
   * The plain claim shared with the other workers on a caller-given pool; undefined for a
   * worker with its own pools, which claims on its own.
   */
  sharedClaim?: SharedClaim;
}

/** Claims and starts steps while the worker runs; see the module comment. */
export class ClaimLoop {
  /** Steps in `inflight` whose handler settled and whose outcome is being recorded. */
  private finishing = 0;
  /** The connection of the claim statement in flight, if any (for `cancel`). */
  private claimConn: pg.ClientBase | undefined;
  /** The connection of the next-due read in flight, which may overlap a claim (for `cancel`). */
  private dueConn: pg.ClientBase | undefined;
  private wakeResolve: (() => void) | undefined;
  private wakePending = false;
  /** The loop waits for a free slot: a step that settles wakes it. */
  private slotWait = false;
  /** The next-due read in flight (`idleWait`), if any, and when it began (Infinity until then). */
  private dueRead: { startedAt: number; result: Promise<number> } | undefined;
  /** `performance.now()` at the last wake: a next-due read begun before may not see its cause. */
  private wokenAt = Number.NEGATIVE_INFINITY;
  /** Empty claims in a row while a step was due already (`idleWait`'s backoff). */
  private overdue = 0;
  /** When the next due step was last read (ms, this process's clock), and when it is due. */
  private dueReadAt = 0;
  private dueAt: number | undefined;
  /** `workflow/node` of every node the worker can run: it claims only those. */
  private readonly nodeKeys: string[];
  private readonly workflowNames: string[];
  /** The limited actions' claims (docs/flow-control.md). */
  private readonly flow: FlowControl;
  /** Alternates which claim, plain or limited, a worker with limited actions runs first. */
  private limitedFirst = false;
  /** The slots the last plain claim asked for (`claimPlain`). */
  private asked = 0;
  /**
   * Until when a busy worker waits for more free slots before it claims (`gatherMs`): GATHER_MS
   * after the first slot freed since the last claim; undefined while none was.
   */
  private gatherUntil: number | undefined;

  constructor(
    /** Read by the loop's steps too. */
    readonly parts: ClaimParts,
    private readonly config: ClaimConfig,
  ) {
    this.workflowNames = [...parts.workflows.keys()];
    this.nodeKeys = [...parts.workflows.values()].flatMap((wf) =>
      wf.nodes.map((n) => `${wf.name}/${n.name}`),
    );
    this.flow = new FlowControl({
      controlPool: parts.controlPool,
      db: parts.db,
      workflows: parts.workflows,
      log: parts.log,
      workerId: config.workerId,
      leaseMs: config.leaseMs,
      setClaimConn: (c) => {
        this.claimConn = c;
      },
    });
  }

  /** Ends the current wait (or the next one) at once. */
  wake(): void {
    this.wokenAt = performance.now();
    this.wakePending = true;
    this.wakeResolve?.();
  }

  /** The loop: claims up to the free slots, then waits for a wake-up or the poll interval. */
  async run(): Promise<void> {
    let failures = 0;
    // For listLimits in processes without the definitions.
    await this.flow.record();
    while (this.parts.isRunning()) {
      const want = this.freeSlots();
      const gather = want > 0 ? this.gatherMs(want) : 0;
      if (want > 0 && gather === 0) {
        this.wakePending = false;
        this.gatherUntil = undefined;
        let got: number;
        try {
          got = await this.claim(want);
          failures = 0;
        } catch (err) {
          // One failed statement must not stop the loop: back off, then claim again.
          failures++;
          this.parts.log.error({ err: String(err), failures }, 'claim failed; backing off');
          await this.waitForWake(Math.min(100 * 2 ** failures, 5_000));
          continue;
        }
        // A shared claim asks for the slots free when its statement goes out, maybe more.
        if (got >= Math.max(want, this.asked)) continue;
        // Slots left free: sleep until the next step is due. The next due time is read again
        // when nothing was claimed or the last read is a quarter second old; else the last read
        // stands (a busy loop would read it after every completion, and completions that release
        // steps NOTIFY too).
        const fresh = got > 0 && Date.now() - this.dueReadAt < 250;
        const wait = fresh ? this.untilKnownDue() : await this.idleWait();
        // A step held back by a rate limit may start before the next due step.
        await this.waitForWake(Math.min(wait, this.flow.waitMs() ?? wait));
        continue;
      }
      this.slotWait = true;
      await this.waitForWake(gather > 0 ? gather : this.config.pollIntervalMs);
      this.slotWait = false;
    }
  }

  /**
   * How long a claim of `want` steps waits for more slots to free (ms; 0: claim now). A busy
   * worker claims in batches: while at least half of its slots run handlers and fewer than a
   * tenth of them (or `batchSize`) are free, it waits until that many are, or until GATHER_MS
   * after the first of them was freed. Steps that end one at a time, as handlers that call other
   * services do, then cost a claim per tenth of the slots instead of a claim per step (a claim of
   * 1 step costs the server about as much as one of 20). A worker with half its slots or more free
   * claims at once, so an idle worker's pickup does not wait; so does one woken for new work (a
   * NOTIFY, a due step) with no slot freed since its last claim, as nothing is being gathered.
   */
  private gatherMs(want: number): number {
    const { concurrency, batchSize } = this.config;
    const running = this.parts.inflight.size - this.finishing;
    if (want >= Math.min(Math.ceil(concurrency / 10), batchSize) || running * 2 < concurrency) {
      return 0;
    }
    const now = performance.now();
    return this.gatherUntil !== undefined && now < this.gatherUntil ? this.gatherUntil - now : 0;
  }

  /**
   * Cancels the claim statement in flight (a CancelRequest, `cancelStatement`, which reaches the
   * server backend behind PgBouncer too), so that a claim hanging past the stop's grace period
   * takes nothing that would run on a stopped worker.
   */
  async cancel(): Promise<void> {
    const c = this.claimConn;
    const shared = this.parts.sharedClaim;
    if (shared && !(await shared.cancel(this.config.workerId))) {
      this.parts.log.warn({}, 'could not cancel the shared claim in flight');
    }
    if (c && !(await cancelStatement(c))) {
      this.parts.log.warn({}, 'could not cancel the claim in flight');
    }
    const d = this.dueConn;
    if (d && !(await cancelStatement(d))) {
      this.parts.log.warn({}, 'could not cancel the next-due read in flight');
    }
  }

  /**
   * Steps the next claim may take. A slot is free once its handler settled, even while its
   * outcome is still being recorded (batched completion), so the next claim overlaps the
   * completion statement instead of waiting for it. The worker holds at most 2 × `concurrency`
   * steps in all (running or waiting to be recorded), so a slow database does not let them pile
   * up.
   */
  private freeSlots(): number {
    const { concurrency, batchSize } = this.config;
    const held = this.parts.inflight.size;
    return Math.min(concurrency - (held - this.finishing), 2 * concurrency - held, batchSize);
  }

  private waitForWake(ms: number): Promise<void> {
    if (this.wakePending) {
      this.wakePending = false;
      return Promise.resolve();
    }
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(t);
        this.wakeResolve = undefined;
        resolve();
      };
      const t = setTimeout(done, ms);
      this.wakeResolve = () => {
        this.wakePending = false;
        done();
      };
    });
  }

  /**
   * How long to wait before the next claim when it came back empty: until the next step of the
   * worker's workflows is due (by the database's clock), at most the poll interval. A NOTIFY for
   * a new or rescheduled step ends the wait early, so the worker re-reads the next due time. The
   * read gives up after a short lock wait (an operator's lock on the table), so the loop goes on
   * to its claim, which stop() knows how to cancel; it is cancellable meanwhile too.
   */
  private async idleWait(): Promise<number> {
    // Woken (a NOTIFY) since the claim: claim again at once rather than after the read.
    if (this.wakePending) return 0;
    // One read at a time: a wake leaves it running (below), and the next idle wait shares it,
    // unless it began before the last wake: its snapshot may predate what woke the loop (a step
    // due soon that the claim could not take yet), so a new read follows it.
    let cur = this.dueRead;
    if (cur === undefined || cur.startedAt <= this.wokenAt) {
      const before = cur?.result;
      const next: { startedAt: number; result: Promise<number> } = {
        startedAt: Number.POSITIVE_INFINITY,
        result: Promise.resolve(0),
      };
      const start = () => {
        // The loop may have stopped while the read before ran: no read on a closing pool.
        if (!this.parts.isRunning()) return Promise.resolve(this.config.pollIntervalMs);
        next.startedAt = performance.now();
        return this.readDue(this.wokenAt);
      };
      next.result = (before ? before.then(start) : start()).finally(() => {
        if (this.dueRead === next) this.dueRead = undefined;
      });
      this.dueRead = cur = next;
    }
    const read = cur.result;
    // A wake during the read ends the wait for it, its wakePending kept, so the loop claims at
    // once instead of one read's round trips later; the read still records the due time.
    const woken = new Promise<number>((resolve) => {
      this.wakeResolve = () => resolve(0);
    });
    try {
      return await Promise.race([read, woken]);
    } finally {
      this.wakeResolve = undefined;
    }
  }

  /**
   * `idleWait`'s read of the next due step: the wait it gives; never rejects. A shared read
   * begun at or before `notBefore` (the last wake) is not joined.
   */
  private async readDue(notBefore: number): Promise<number> {
    const { parts, config } = this;
    try {
      const read = () =>
        withTransaction(parts.controlPool, async (c) => {
          this.dueConn = c;
          try {
            return await nextDueIn(c, parts.db, {
              workflows: this.workflowNames,
              nodeKeys: this.nodeKeys,
              lockTimeoutMs: 100,
              // Cut off between its statements and its COMMIT, the transaction ends on the server.
              idleLimitMs: config.leaseMs,
            });
          } finally {
            this.dueConn = undefined;
          }
        });
      // Workers sharing a claim share the read too (same workflows and nodes).
      const dueIn = await (parts.sharedClaim ? parts.sharedClaim.nextDue(read, notBefore) : read());
      this.dueReadAt = Date.now();
      this.dueAt = dueIn === undefined ? undefined : this.dueReadAt + dueIn;
      if (dueIn === undefined) return config.pollIntervalMs;
      if (dueIn <= 0) {
        // Due already, yet the claim found nothing: it came due just after, or another worker
        // holds it locked. Claim again soon, backing off while that lasts.
        this.overdue = Math.min(this.overdue + 1, 8);
        return Math.min(config.pollIntervalMs, 2 ** this.overdue);
      }
      this.overdue = 0;
      // A millisecond late rather than early: the claim compares with the database's now().
      return Math.min(config.pollIntervalMs, Math.ceil(dueIn) + 1);
    } catch (err) {
      parts.log.warn({ err: String(err) }, 'could not read the next due step; polling');
      return config.pollIntervalMs;
    }
  }

  /** The wait until the next due step as last read (`idleWait`), at most the poll interval. */
  private untilKnownDue(): number {
    const { pollIntervalMs } = this.config;
    if (this.dueAt === undefined) return pollIntervalMs;
    return Math.min(pollIntervalMs, Math.max(1, Math.ceil(this.dueAt - Date.now()) + 1));
  }

  /**
   * Claims up to `limit` steps and starts each: by the plain claim, and for a worker with
   * limited actions by their limited claims too, the two taking turns at going first (so that
   * neither kind of step fills every slot while the other waits).
   * @returns how many were claimed.
   */
  private async claim(limit: number): Promise<number> {
    this.asked = 0;
    if (!this.flow.active) return this.claimPlain(limit);
    this.limitedFirst = !this.limitedFirst;
    let got = 0;
    if (!this.limitedFirst) got += await this.claimPlain(limit);
    if (got < limit) got += await this.claimLimited(limit - got);
    if (this.limitedFirst && got < limit) got += await this.claimPlain(limit - got);
    return got;
  }

  /** The limited claims (`FlowControl.claim`) of up to `limit` steps, each started. */
  private async claimLimited(limit: number): Promise<number> {
    this.parts.counters.claims++;
    let rows: ClaimedStep[];
    try {
      rows = await this.flow.claim(limit);
    } catch (err) {
      if (!isLimitExceeded(err)) throw err;
      // As for the plain claim: one step's upstream outputs over a limit of PostgreSQL's.
      this.parts.log.warn(
        { err: String(err) },
        'limited claim failed on a data limit; claiming steps without their upstream outputs',
      );
      rows = await this.flow.claim(limit, true);
    }
    this.startAll(rows);
    return rows.length;
  }

  /** The plain claim of up to `limit` steps (actions without limits), each started. */
  private async claimPlain(limit: number): Promise<number> {
    const { parts, config } = this;
    const params = {
      workflows: this.workflowNames,
      limit,
      workerId: config.workerId,
      leaseMs: config.leaseMs,
      nodeKeys: this.nodeKeys,
    };
    const t0 = parts.telemetry?.claimStarted();
    parts.counters.claims++;
    this.asked = limit;
    // Without limited actions the shared claim asks for the slots free when its statement goes
    // out: those the worker's steps free while it waits go in the same statement.
    const slots = this.flow.active ? () => limit : () => Math.max(limit, this.freeSlots());
    const rows = parts.sharedClaim
      ? await this.claimShared(parts.sharedClaim, slots)
      : await withConnection(parts.controlPool, async (c) => {
          // Known while the statement runs, so that stop() can cancel a claim that hangs.
          this.claimConn = c;
          try {
            return await claimSteps(c, parts.db, params);
          } catch (err) {
            if (!isLimitExceeded(err)) throw err;
            // One step's data is over a limit of PostgreSQL's (its upstream outputs too large for
            // one JSON value): the statement failed whole, and that step, the oldest, would be in
            // every claim. Claim without the upstream outputs; each step loads its own, so only
            // the one that cannot fails.
            parts.log.warn(
              { err: String(err) },
              'claim failed on a data limit; claiming steps without their upstream outputs',
            );
            return await claimStepsWithoutUpstream(c, parts.db, params);
          } finally {
            this.claimConn = undefined;
          }
        });
    if (t0 !== undefined) parts.telemetry?.claimEnded(t0);
    this.startAll(rows);
    return rows.length;
  }

  /** The plain claim through the claim shared with the other workers on the pool. */
  private async claimShared(shared: SharedClaim, slots: () => number): Promise<ClaimedStep[]> {
    const { parts, config } = this;
    const { rows, asked } = await shared.claim(
      config.workerId,
      slots,
      () => parts.isRunning(),
      (err) =>
        parts.log.warn(
          { err: String(err) },
          'claim failed on a data limit; claiming steps without their upstream outputs',
        ),
    );
    this.asked = asked;
    return rows;
  }

  /** Starts each claimed step and keeps it in `inflight` until its outcome is recorded. */
  private startAll(rows: readonly ClaimedStep[]): void {
    const { parts } = this;
    for (const row of rows) {
      parts.counters.claimed++;
      const step = new Step(this, row);
      parts.inflight.add(step);
      step.done = step.go();
    }
  }

  /** A step's handler settled (or will not run): its claim slot may be reused. */
  stepFinishing(): void {
    this.finishing++;
    // The gathering of freed slots counts from the first one freed since the last claim.
    this.gatherUntil ??= performance.now() + GATHER_MS;
    // Only a loop short of slots needs it: one that had slots left found nothing more to claim,
    // and new work wakes it by NOTIFY (a claim and a next-due read fewer per step).
    if (this.slotWait) this.wake();
  }

  /**
   * A step's outcome is recorded (or given up): it leaves `inflight`, and the loop claims again if
   * that may find something: it waits for a slot, the step failed or snoozed (its next attempt's
   * time), released downstream nodes (a worker without LISTEN), or freed a limit's slot. A leaf
   * that completed does none of these, so an idle worker sends no empty claim and next-due read
   * after each step.
   */
  stepDone(step: Step): void {
    if (step.finishing) this.finishing--;
    const { inflight } = this.parts;
    inflight.delete(step);
    if (this.slotWait || !step.endedQuietly || this.flow.active) this.wake();
  }

  /**
   * Loads the upstream outputs of a step claimed without them. A step whose outputs cannot be
   * loaded as one JSON value (over PostgreSQL's limit) is an error of that step alone.
   * @throws the database error when it is not such a limit (the lease then expires, and the step
   *   is run again).
   */
  async loadUpstream(
    row: ClaimedStep,
    ancestors: readonly string[],
  ): Promise<{ ok: true; upstream: Record<string, Json> } | { ok: false; error: Error }> {
    try {
      const upstream = await selectUpstream(this.parts.pool, this.parts.db, {
        runId: row.run_id,
        nodes: ancestors,
      });
      return { ok: true, upstream };
    } catch (err) {
      if (!isLimitExceeded(err)) throw err;
      return {
        ok: false,
        error: new Error(
          `the outputs of the upstream nodes of '${row.node}' cannot be loaded as one JSON value: ${describeError(err)} (PostgreSQL's limit for one value is 256 MiB; keep large data outside the outputs and pass references)`,
        ),
      };
    }
  }
}

/**
 * One claimed step from its start to its recorded outcome: the worker's handle on it, the abort
 * of its attempt, and what executing and recording it need. One object per step, with methods
 * rather than closures, since everything made per step is the no-op worker's garbage-collection
 * cost.
 */
class Step extends StepAbort implements StepHandle, ExecuteParts, Attempt, ContextParts, ContextTx {
  readonly runId: string;
  readonly node: string;
  readonly attempt: number;
  /** `BatchEntry.leaf`: from the claimed row. */
  readonly leaf: boolean;
  /** A leaf, completed or skipped: its outcome released nothing (`ClaimLoop.stepDone`). */
  endedQuietly = false;
  done!: Promise<void>;
  finishing = false;
  readonly workflow: Workflow<unknown>;
  backoff: Backoff | undefined;
  ancestors: readonly string[] = NO_ANCESTORS;
  /** `BatchEntry`: the output, and the batch's resolvers while it waits in one. */
  output = '';
  resolve: ((done: 0 | 1) => void) | undefined = undefined;
  reject: ((err: unknown) => void) | undefined = undefined;
  /** The step's logger and completion transaction, each made when first needed. */
  private logger: Logger | undefined = undefined;
  private made: CompletionTx | undefined = undefined;
  /** The attempt's completion transaction may no longer be opened (`endTx`). */
  private txEnded = false;

  constructor(
    private readonly loop: ClaimLoop,
    readonly row: ClaimedStep,
  ) {
    super();
    const { parts } = loop;
    this.runId = row.run_id;
    this.node = row.node;
    this.attempt = row.attempt;
    this.leaf = row.leaf === true;
    this.workflow = parts.workflows.get(row.workflow) as Workflow<unknown>;
  }

  /** The step's logger, bound to runId, node and attempt. */
  get log(): Logger {
    this.logger ??= new StepLogger(this.loop.parts.log, this);
    return this.logger;
  }

  /** `Attempt.tx`: the completion transaction if the handler asked for one. */
  get tx(): CompletionTx | undefined {
    return this.made;
  }

  endTx(): void {
    this.txEnded = true;
  }

  /** `ContextTx.open`: `ctx.completionTx()`, the transaction made on the first call. */
  open(): Promise<Tx> {
    let tx = this.made;
    if (tx === undefined) {
      tx = new CompletionTx(this, this.loop.parts.pool, this.log);
      // Asked for after the attempt ended (a detached call): refused, as an ended one is.
      if (this.txEnded) tx.end();
      this.made = tx;
    }
    return tx.open();
  }

  /** `ContextTx.current`. */
  current(): Tx | undefined {
    return this.made?.current();
  }

  // The worker's handles, read through the loop: nothing more kept per step.
  get client(): Client {
    return this.loop.parts.client;
  }
  get db(): SqlScope {
    return this.loop.parts.db;
  }
  get controlPool(): pg.Pool {
    return this.loop.parts.controlPool;
  }
  get maxPayloadBytes(): number {
    return this.loop.parts.client.maxPayloadBytes;
  }

  /** `ContextParts.step`: the claimed row. */
  get step(): ClaimedStep {
    return this.row;
  }

  /** `ContextParts.completionTx`: the step itself, which makes its transaction when opened. */
  get completionTx(): ContextTx {
    return this;
  }

  markFinishing(): void {
    if (this.finishing) return;
    this.finishing = true;
    this.loop.stepFinishing();
  }

  context(node: NodeDef<unknown>): Context {
    this.ancestors = node.ancestors;
    return makeContext(this);
  }

  leaseLost(): void {
    this.abort(new LeaseLostError(this.runId, this.node, this.attempt));
  }

  /** Executes the step and records its outcome (observed when telemetry is on); never rejects. */
  async go(): Promise<void> {
    const { parts } = this.loop;
    try {
      // Observed from here to the recorded outcome: the handler runs in the step's span.
      const observation = parts.telemetry?.beginStep(this.row);
      let recorded: Recorded;
      if (!observation) {
        recorded = await this.run();
      } else {
        try {
          recorded = await observation.run(() => this.run());
        } catch (err) {
          observation.end({ outcome: 'unrecorded', error: err });
          throw err;
        }
        observation.end(recorded);
      }
      this.endedQuietly =
        this.leaf && (recorded.outcome === 'completed' || recorded.outcome === 'skipped');
    } catch (err) {
      parts.log.error(
        { err: String(err), runId: this.runId, node: this.node },
        'step runner failed',
      );
    } finally {
      this.loop.stepDone(this);
    }
  }

  private async run(): Promise<Recorded> {
    const { row, workflow, loop } = this;
    const { completer } = loop.parts;
    const node = workflow.nodeByName.get(row.node);
    if (row.upstream === null) {
      const loaded = await loop.loadUpstream(row, node?.ancestors ?? []);
      if (!loaded.ok) {
        this.markFinishing();
        this.backoff = node?.action.backoff;
        return completer.record(this, Outcome.discarded('input_invalid', loaded.error));
      }
      row.upstream = loaded.upstream;
    }
    const outcome = await executeStep(row, this);
    this.backoff = workflow.nodeByName.get(row.node)?.action.backoff;
    return completer.record(this, outcome);
  }
}

const NO_ANCESTORS: readonly string[] = [];

/**
 * A step's logger: behaves as the worker's logger's `child({ runId, node, attempt })`, made only
 * when something is logged (most steps log nothing), its bindings read from the step then.
 */
class StepLogger implements Logger {
  private made: Logger | undefined;
  constructor(
    private readonly parent: Logger,
    private readonly step: Step,
  ) {}
  private get logger(): Logger {
    const { step } = this;
    this.made ??= this.parent.child({
      runId: step.runId,
      node: step.node,
      attempt: step.attempt,
    });
    return this.made;
  }
  debug(obj: object, msg?: string): void {
    this.logger.debug(obj, msg);
  }
  info(obj: object, msg?: string): void {
    this.logger.info(obj, msg);
  }
  warn(obj: object, msg?: string): void {
    this.logger.warn(obj, msg);
  }
  error(obj: object, msg?: string): void {
    this.logger.error(obj, msg);
  }
  child(bindings: object): Logger {
    return this.logger.child(bindings);
  }
}
