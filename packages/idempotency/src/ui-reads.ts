/**
 * The operator UI's reads of the ledger (`@cyclone/ui`): a run's rows, a node's rows, the unknown
 * outcomes, a key found by the go-to box. Each takes a `Queryable` (the UI reader's read-only
 * transaction, `reader.read(c => …)`) and the quoted schema (`reader.q`); each goes by the
 * ledger's primary key or its partial index on unknown outcomes, so none scans the ledger. When
 * the ledger is not installed (the application does not use @cyclone/idempotency), each answers
 * as for an empty ledger (null for the count). Bodies come back as JSON text, cut to a preview.
 */
import type { Queryable } from './adapter-db.js';
import type { LedgerPhase } from './ledger.js';
import * as sql from './sql.js';

/** An ISO-8601 UTC timestamp. */
type IsoTime = string;

/** A ledger row as the UI shows it: timestamps as ISO-8601 UTC, bodies as (cut) JSON text. */
export interface UiLedgerRow {
  runId: string;
  /** `${runId}:${node}[:${scope}]`. */
  key: string;
  node: string;
  scope: string | null;
  provider: string | null;
  operation: string | null;
  phase: LedgerPhase;
  generation: number;
  ownerAttempt: number;
  /** Calls let through for this key, across attempts and generations. */
  calls: number;
  providerRef: string | null;
  /** When the last call was let through; null when none is outstanding. */
  callStartedAt: IsoTime | null;
  createdAt: IsoTime;
  updatedAt: IsoTime;
  /** The recorded result as JSON text, its first `previewChars` characters; null when none. */
  result: string | null;
  /** Bytes of the whole result's JSON text; null when none. */
  resultBytes: number | null;
  /** The last failure recorded as JSON text, its first `previewChars` characters; null when none. */
  error: string | null;
}

/** A page of unknown outcomes, oldest first. */
export interface UiUnknownPage {
  items: UiLedgerRow[];
  /** The cursor of the next page; null at the end. */
  next: string | null;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const DEFAULT_PREVIEW = 65_536;

/** Whether the ledger table exists in schema `s` (quoted). */
async function installed(c: Queryable, q: string): Promise<boolean> {
  const { rows } = await c.query(sql.ledgerExists(q), [`${q}.${sql.LEDGER_TABLE}`]);
  return rows[0]?.present === true;
}

/**
 * A run's ledger rows by key, only node `node`'s when given; [] when the ledger is not installed
 * or `runId` is not a uuid.
 */
export async function readLedgerOfRun(
  c: Queryable,
  q: string,
  runId: string,
  node?: string,
  o: { previewChars?: number } = {},
): Promise<UiLedgerRow[]> {
  if (typeof runId !== 'string' || !UUID.test(runId) || !(await installed(c, q))) return [];
  const { rows } = await c.query(sql.uiRunRows(q), [
    runId,
    o.previewChars ?? DEFAULT_PREVIEW,
    node ?? null,
  ]);
  return rows.map(uiRow);
}

/**
 * The unknown outcomes (phase `unknown`) last updated at least `olderThanMs` ago (default 0),
 * oldest first, `limit` per page (1 to 200, default 50), from `cursor` (a `next` of an earlier
 * page). An empty page when the ledger is not installed.
 * @throws RangeError for a bad limit, age or cursor.
 */
export async function readUnknownOutcomes(
  c: Queryable,
  q: string,
  o: { olderThanMs?: number; cursor?: string; limit?: number; previewChars?: number } = {},
): Promise<UiUnknownPage> {
  const limit = o.limit ?? 50;
  const olderThanMs = o.olderThanMs ?? 0;
  if (!(Number.isSafeInteger(limit) && limit >= 1 && limit <= 200)) {
    throw new RangeError(`limit must be an integer from 1 to 200, got ${String(limit)}`);
  }
  if (!(Number.isFinite(olderThanMs) && olderThanMs >= 0)) {
    throw new RangeError(`olderThanMs must be a number ≥ 0, got ${String(olderThanMs)}`);
  }
  const after = o.cursor === undefined ? [null, null, null] : decodeCursor(o.cursor);
  if (!(await installed(c, q))) return { items: [], next: null };
  const { rows } = await c.query(sql.uiUnknownRows(q), [
    olderThanMs,
    ...after,
    limit + 1,
    o.previewChars ?? DEFAULT_PREVIEW,
  ]);
  const page = rows.slice(0, limit);
  const last = page[page.length - 1];
  return {
    items: page.map(uiRow),
    next:
      rows.length > limit && last
        ? Buffer.from(JSON.stringify([last.updated_key, last.run_id, last.key]), 'utf8').toString(
            'base64url',
          )
        : null,
  };
}

/**
 * The unknown outcomes open, counted up to `cap` (by their partial index); null when the ledger
 * is not installed.
 */
export async function countUnknownOutcomes(
  c: Queryable,
  q: string,
  cap = 10_000,
): Promise<{ count: number; capped: boolean } | null> {
  if (!(await installed(c, q))) return null;
  const { rows } = await c.query(sql.countUnknown(q), [cap]);
  const n = Number(rows[0]?.n ?? 0);
  return { count: n, capped: n >= cap };
}

/**
 * The run and node of idempotency key `key` (`${runId}:${node}[:${scope}]`, as a provider's
 * dashboard shows it), by the ledger's primary key; null when the text is not such a key, the
 * ledger has no row for it, or the ledger is not installed.
 */
export async function findIdempotencyKey(
  c: Queryable,
  q: string,
  key: string,
): Promise<{ kind: 'idempotencyKey'; runId: string; node: string } | null> {
  const text = String(key ?? '').trim();
  const runId = text.slice(0, 36);
  if (!UUID.test(runId) || text[36] !== ':' || text.includes('\u0000')) return null;
  if (!(await installed(c, q))) return null;
  const { rows } = await c.query(sql.uiFindKey(q), [runId.toLowerCase(), text]);
  const r = rows[0];
  return r ? { kind: 'idempotencyKey', runId: String(r.run_id), node: String(r.node) } : null;
}

/** @throws RangeError for a cursor `readUnknownOutcomes` did not make. */
function decodeCursor(cursor: string): [string, string, string] {
  try {
    const v = JSON.parse(Buffer.from(String(cursor), 'base64url').toString('utf8'));
    if (
      Array.isArray(v) &&
      v.length === 3 &&
      typeof v[0] === 'string' &&
      !Number.isNaN(new Date(v[0]).getTime()) &&
      typeof v[1] === 'string' &&
      UUID.test(v[1]) &&
      typeof v[2] === 'string'
    ) {
      return [v[0], v[1], v[2]];
    }
  } catch {
    // reported below
  }
  throw new RangeError('bad cursor');
}

function isoOrNull(v: unknown): IsoTime | null {
  return v === null || v === undefined ? null : new Date(v as string | Date).toISOString();
}

function uiRow(r: Record<string, unknown>): UiLedgerRow {
  return {
    runId: String(r.run_id),
    key: String(r.key),
    node: String(r.node),
    scope: (r.scope as string | null) ?? null,
    provider: (r.provider as string | null) ?? null,
    operation: (r.operation as string | null) ?? null,
    phase: r.phase as LedgerPhase,
    generation: Number(r.generation),
    ownerAttempt: Number(r.owner_attempt),
    calls: Number(r.calls),
    providerRef: (r.provider_ref as string | null) ?? null,
    callStartedAt: isoOrNull(r.call_started_at),
    createdAt: isoOrNull(r.created_at) as IsoTime,
    updatedAt: isoOrNull(r.updated_at) as IsoTime,
    result: (r.result as string | null) ?? null,
    resultBytes:
      r.result_bytes === null || r.result_bytes === undefined ? null : Number(r.result_bytes),
    error: (r.error as string | null) ?? null,
  };
}
