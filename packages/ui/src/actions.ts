/**
 * The API's mutations, each through the client's public API (the same code path and typed errors
 * as the CLI): retry a node, retry all, cancel, signal, bulk retry-all or cancel, and the schedule
 * actions. Every one is written to the audit log with the user (and to `onAction`), whatever its
 * outcome.
 */
import type { Client, Logger } from '@cyclone/core';
import { ApiFailure, toApiFailure } from './errors.js';
import type { Reads } from './reads.js';
import {
  BULK_CANCEL_NOTICE,
  type BulkAction,
  type BulkResponse,
  cancelNotice,
  RETRY_NOTICE,
  type RunState,
  type RunsFilter,
  scheduleNotice,
  signalNotice,
} from './shared/api.js';

/** One mutation as the audit log records it. */
export interface AuditEvent {
  /** ISO time the action finished. */
  at: string;
  /** The user the authorize hook named; null without a hook. */
  user: string | null;
  action:
    | 'retry'
    | 'retryAll'
    | 'cancel'
    | 'signal'
    | 'bulk'
    | 'pauseSchedule'
    | 'resumeSchedule'
    | 'triggerSchedule';
  runId?: string;
  node?: string;
  signal?: string;
  schedule?: string;
  /** What the action did: reopened nodes, counts of a bulk call… */
  result?: unknown;
  /** The error code when the action was refused or failed. */
  error?: string;
}

/** The `onAction` option: called after every mutation (awaited; a throw is logged, not answered). */
export type ActionHook = (event: AuditEvent) => void | Promise<void>;

/** How many runs one listing of a bulk call reads. */
const BULK_PAGE = 100;

/** The mutations, with the audit trail. */
export class Actions {
  constructor(
    private readonly client: Client,
    private readonly reads: Reads,
    private readonly logger: Logger,
    private readonly onAction: ActionHook | undefined,
    private readonly maxBulk: number,
  ) {}

  /** `client.retry(runId, node)`. */
  async retry(user: string | null, runId: string, node: string) {
    const reopened = await this.audited({ user, action: 'retry', runId, node }, () =>
      this.client.retry(runId, node),
    );
    return { runId, reopened, notice: RETRY_NOTICE };
  }

  /** `client.retryAll(runId)`. */
  async retryAll(user: string | null, runId: string) {
    const reopened = await this.audited({ user, action: 'retryAll', runId }, () =>
      this.client.retryAll(runId),
    );
    return { runId, reopened, notice: RETRY_NOTICE };
  }

  /** `client.cancel(runId)`. */
  async cancel(user: string | null, runId: string) {
    await this.audited({ user, action: 'cancel', runId }, () => this.client.cancel(runId));
    return { runId, cancelled: true as const, notice: cancelNotice(runId) };
  }

  /** `client.signal(runId, name, payload)`. */
  async signal(user: string | null, runId: string, name: string, payload: unknown) {
    const result = await this.audited({ user, action: 'signal', runId, signal: name }, () =>
      this.client.signal(runId, name, payload),
    );
    return {
      runId,
      name,
      accepted: result.accepted,
      waitingNodes: result.waitingNodes,
      notice: signalNotice(runId, name, result),
    };
  }

  /** `client.pauseSchedule` / `resumeSchedule` / `triggerSchedule`. */
  async schedule(user: string | null, name: string, action: 'pause' | 'resume' | 'trigger') {
    const audit = {
      pause: 'pauseSchedule',
      resume: 'resumeSchedule',
      trigger: 'triggerSchedule',
    } as const;
    const result = await this.audited(
      { user, action: audit[action], schedule: name },
      async (): Promise<object | undefined> => {
        if (action === 'pause') await this.client.pauseSchedule(name);
        else if (action === 'resume') await this.client.resumeSchedule(name);
        else return this.client.triggerSchedule(name);
        return undefined;
      },
    );
    return {
      name,
      action,
      ...(result ? (jsonDates(result) as object) : {}),
      notice: scheduleNotice(name, action),
    };
  }

  /**
   * A bulk action over `ids`, or over the runs `filter` matches from `cursor` on (newest first),
   * at most `maxBulk` runs per call, each through the client in its own transaction. A run whose
   * state makes the action pointless is `skipped` (retryAll that reopens nothing, cancel of a
   * finished run); one that fails otherwise is listed in `failed` and the call goes on. `expect`:
   * on the first call of a filter, refused (409) when the filter now matches more than twice the
   * runs the user confirmed.
   */
  async bulk(
    user: string | null,
    body: {
      action: BulkAction;
      ids?: string[] | undefined;
      filter?: RunsFilter | undefined;
      cursor?: string | undefined;
      expect?: number | undefined;
    },
  ): Promise<BulkResponse> {
    const out: BulkResponse = {
      action: body.action,
      processed: 0,
      changed: 0,
      skipped: 0,
      failed: [],
      next: null,
      notice: body.action === 'cancel' ? BULK_CANCEL_NOTICE : RETRY_NOTICE,
    };
    const apply = async (runId: string, state: RunState | undefined) => {
      out.processed++;
      const verdict = await this.applyOne(body.action, runId, state);
      if (verdict === 'changed') out.changed++;
      else if (verdict === 'skipped') out.skipped++;
      else out.failed.push({ runId, error: verdict.error, message: verdict.message });
    };

    if (body.ids) {
      if (body.ids.length > this.maxBulk) {
        throw new ApiFailure(
          400,
          'bad_request',
          `A bulk action takes at most ${this.maxBulk} runs; ${body.ids.length} were given.`,
        );
      }
      for (const id of body.ids) await apply(id, undefined);
    } else {
      const filter = body.filter ?? {};
      if (body.expect !== undefined && body.cursor === undefined) {
        await this.checkDrift(filter, body.expect);
      }
      let cursor = body.cursor;
      for (;;) {
        const room = this.maxBulk - out.processed;
        const page = await this.reads.runsPage(filter, cursor, Math.min(BULK_PAGE, room));
        for (const run of page.items) await apply(run.runId, run.state);
        cursor = page.next ?? undefined;
        if (!cursor) break;
        if (out.processed >= this.maxBulk) {
          out.next = cursor;
          break;
        }
      }
    }
    await this.log({
      at: new Date().toISOString(),
      user,
      action: 'bulk',
      result: {
        action: out.action,
        processed: out.processed,
        changed: out.changed,
        skipped: out.skipped,
        failed: out.failed.length,
        ...(body.filter ? { filter: body.filter } : {}),
        more: out.next !== null,
      },
    });
    return out;
  }

  /**
   * Refuses a bulk call whose filter matches more than twice the runs the user confirmed: walks
   * the filter's keyset pages (at most 2 × `expect` + 1 rows, 200 a page) and stops as soon as the
   * count is over.
   */
  private async checkDrift(filter: RunsFilter, expect: number): Promise<void> {
    const over = 2 * expect;
    let seen = 0;
    let cursor: string | undefined;
    do {
      const page = await this.reads.runsPage(filter, cursor, Math.min(200, over + 1 - seen));
      seen += page.items.length;
      cursor = page.next ?? undefined;
    } while (cursor && seen <= over);
    if (seen > over) {
      throw new ApiFailure(
        409,
        'invalid_state',
        `The filter now matches more than ${over} runs, over twice the ${expect} confirmed; look again before acting.`,
      );
    }
  }

  /** One run of a bulk call: `changed`, `skipped`, or the error it met. */
  private async applyOne(
    action: BulkAction,
    runId: string,
    state: RunState | undefined,
  ): Promise<'changed' | 'skipped' | { error: string; message: string }> {
    // Known from the listing: nothing to do, and the client would only say so.
    if (action === 'cancel' && (state === 'completed' || state === 'cancelled')) return 'skipped';
    try {
      if (action === 'retryAll') {
        const reopened = await this.client.retryAll(runId);
        return reopened.length > 0 ? 'changed' : 'skipped';
      }
      await this.client.cancel(runId);
      return 'changed';
    } catch (err) {
      const failure = toApiFailure(err);
      if (failure.code === 'invalid_state') return 'skipped';
      if (failure.status >= 500) {
        this.logger.error({ err, runId, action }, 'cyclone-ui: bulk action failed on a run');
      }
      return { error: failure.code, message: failure.message };
    }
  }

  /** Runs `fn`, logging the event with its result or error either way. */
  private async audited<T>(event: Omit<AuditEvent, 'at'>, fn: () => Promise<T>): Promise<T> {
    try {
      const result = await fn();
      await this.log({ ...event, at: new Date().toISOString(), result: jsonDates(result) });
      return result;
    } catch (err) {
      await this.log({ ...event, at: new Date().toISOString(), error: toApiFailure(err).code });
      throw err;
    }
  }

  private async log(event: AuditEvent): Promise<void> {
    this.logger.info(
      { ...event, user: event.user ?? '-' },
      `cyclone-ui audit: ${event.action}${event.error ? ' refused' : ''}`,
    );
    if (!this.onAction) return;
    try {
      await this.onAction(event);
    } catch (err) {
      this.logger.error({ err }, 'cyclone-ui: the onAction hook threw');
    }
  }
}

/** `value` with its Dates as ISO strings, for a JSON answer or the log. */
function jsonDates(value: unknown): unknown {
  return value === undefined ? undefined : JSON.parse(JSON.stringify(value));
}
