/**
 * The shapes of @cyclone/idempotency's ledger reads for the UI, declared here rather than
 * imported: the package is an optional peer, loaded at run time when installed, so no type of
 * the UI's may require it.
 */
import type { Queryable } from '@cyclone/core/internal';

/** A ledger row as `readLedgerOfRun` returns it (bodies as JSON text cut to `previewChars`). */
export interface UiLedgerRow {
  runId: string;
  key: string;
  node: string;
  scope: string | null;
  provider: string | null;
  operation: string | null;
  phase: 'started' | 'succeeded' | 'failed' | 'unknown';
  generation: number;
  ownerAttempt: number;
  calls: number;
  providerRef: string | null;
  callStartedAt: string | null;
  createdAt: string;
  updatedAt: string;
  result: string | null;
  /** Bytes of the whole result's JSON text. */
  resultBytes: number | null;
  error: string | null;
}

/** The ledger's read functions (each in the reader's read-only transaction). */
export interface LedgerReads {
  readLedgerOfRun(
    q: Queryable,
    s: string,
    runId: string,
    node?: string,
    o?: { previewChars?: number },
  ): Promise<UiLedgerRow[]>;
  readUnknownOutcomes(
    q: Queryable,
    s: string,
    o?: { olderThanMs?: number; cursor?: string; limit?: number; previewChars?: number },
  ): Promise<{ items: UiLedgerRow[]; next: string | null }>;
  countUnknownOutcomes(
    q: Queryable,
    s: string,
    cap?: number,
  ): Promise<{ count: number; capped: boolean } | null>;
  findIdempotencyKey(
    q: Queryable,
    s: string,
    key: string,
  ): Promise<{ kind: 'idempotencyKey'; runId: string; node: string } | null>;
}
