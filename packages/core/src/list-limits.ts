/**
 * `Client.listLimits` (`cyclone limits`): each limit of each limited action with the steps that
 * hold it and the steps waiting for it, per key for a limit with a key. Cheap on a large table:
 * it reads only running steps of limited actions (the slots index), due claimable steps of
 * limited actions (counted up to `LIST_LIMITS_CAP` per action) and the rate limits' admission log.
 */
import type { Db } from './db.js';
import type { ActionLimits } from './limits.js';
import {
  admissions,
  type RecordedLimit,
  selectRecordedLimits,
  slotsHeld,
  stepsWaiting,
} from './sql/flow.js';
import type { LimitInfo } from './types.js';

/** The most waiting steps `listLimits` reads per action (and per flow): counts stop there. */
export const LIST_LIMITS_CAP = 10_000;

/** What `listLimits` reads of a workflow: its nodes' actions and their limits. */
export interface LimitedWorkflow {
  readonly nodes: readonly {
    readonly action: { readonly name: string; readonly limits?: ActionLimits | undefined };
  }[];
}

/** Options of `Client.listLimits`. */
export interface ListLimitsOptions {
  /**
   * The workflows whose actions' limits to list (the calling process's definitions). Without it,
   * the limits the workers recorded when they started.
   */
  workflows?: readonly LimitedWorkflow[];
}

/** The limits of `limits` as stored in `cyclone_limits`, one row per limit. */
export function recordedLimits(action: string, limits: ActionLimits): RecordedLimit[] {
  const out: RecordedLimit[] = [];
  const row = (
    kind: 'concurrency' | 'rate',
    keyed: boolean,
    limit: number,
    period: number | null,
  ) => out.push({ action, kind, keyed, limit, period_ms: period });
  if (limits.concurrency !== undefined) row('concurrency', false, limits.concurrency, null);
  if (limits.keyedConcurrency) row('concurrency', true, limits.keyedConcurrency.limit, null);
  if (limits.rate) row('rate', false, limits.rate.limit, limits.rate.periodMs);
  if (limits.keyedRate) row('rate', true, limits.keyedRate.limit, limits.keyedRate.periodMs);
  return out;
}

/**
 * The limits and their use. The limits are those of `workflows` when given (the definitions of
 * the calling process), else those the workers recorded when they started (`cyclone_limits`:
 * the CLI has no definitions). One row per limit without a key, and one per key with running or
 * waiting steps (or admissions in the window) for a limit with a key, or a single row with key
 * null and zeros when no key is in use (an idle action is listed too); sorted by action, kind,
 * key (null first: the limit without a key, then a limit with a key and none in use).
 */
export async function listLimits(
  db: Db,
  workflows?: readonly LimitedWorkflow[],
): Promise<LimitInfo[]> {
  let limits: RecordedLimit[];
  if (workflows) {
    const seen = new Map<string, ActionLimits>();
    for (const wf of workflows) {
      for (const n of wf.nodes) {
        if (n.action.limits && !seen.has(n.action.name)) seen.set(n.action.name, n.action.limits);
      }
    }
    limits = [...seen].flatMap(([name, l]) => recordedLimits(name, l));
  } else {
    limits = await selectRecordedLimits(db.pool, db);
  }
  const out: LimitInfo[] = [];
  const byAction = new Map<string, RecordedLimit[]>();
  for (const l of limits) byAction.set(l.action, [...(byAction.get(l.action) ?? []), l]);
  for (const [action, list] of byAction) {
    const held = await slotsHeld(db.pool, db, action);
    const waiting = await stepsWaiting(db.pool, db, { action, cap: LIST_LIMITS_CAP });
    const sum = (xs: { n: number }[]) => xs.reduce((a, x) => a + x.n, 0);
    const waitingAll = Math.min(LIST_LIMITS_CAP, sum(waiting));
    for (const l of list) {
      const base = { action, kind: l.kind, keyed: l.keyed, limit: l.limit, periodMs: l.period_ms };
      // A limit with a key and no key in use is still listed, so an idle action shows.
      const perKey = (keys: Map<string, { held: number; waiting: number }>) => {
        if (keys.size === 0) out.push({ ...base, key: null, held: 0, waiting: 0 });
        for (const [key, v] of keys) out.push({ ...base, key, ...v });
      };
      if (l.kind === 'concurrency') {
        if (!l.keyed) {
          out.push({ ...base, key: null, held: sum(held), waiting: waitingAll });
          continue;
        }
        const keys = new Map<string, { held: number; waiting: number }>();
        const at = (k: string) => usage(keys, k);
        for (const h of held) if (h.key !== null) at(h.key).held += h.n;
        for (const w of waiting) if (w.ck !== null) at(w.ck).waiting += w.n;
        perKey(keys);
        continue;
      }
      const window = await admissions(db.pool, db, { action, periodMs: l.period_ms ?? 0 });
      if (!l.keyed) {
        out.push({ ...base, key: null, held: sum(window), waiting: waitingAll });
        continue;
      }
      const keys = new Map<string, { held: number; waiting: number }>();
      const at = (k: string) => usage(keys, k);
      for (const a of window) if (a.key !== '') at(a.key).held += a.n;
      for (const w of waiting) if (w.rk !== null) at(w.rk).waiting += w.n;
      perKey(keys);
    }
  }
  const kindOrder = (k: string) => (k === 'concurrency' ? 0 : 1);
  return out.sort(
    (a, b) =>
      a.action.localeCompare(b.action) ||
      kindOrder(a.kind) - kindOrder(b.kind) ||
      (a.key === b.key
        ? Number(a.keyed) - Number(b.keyed)
        : a.key === null
          ? -1
          : b.key === null
            ? 1
            : a.key.localeCompare(b.key)),
  );
}

/** The usage of key `k` in `keys`, added at zero when missing. */
function usage(
  keys: Map<string, { held: number; waiting: number }>,
  k: string,
): { held: number; waiting: number } {
  const found = keys.get(k);
  if (found) return found;
  const v = { held: 0, waiting: 0 };
  keys.set(k, v);
  return v;
}
