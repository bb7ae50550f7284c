/**
 * Bulk retry or cancel: of the selected runs (one call with their ids), or of every run the
 * filter matches (the server walks the filter newest first, at most `maxBulk` runs per call; the
 * page calls again with the cursor it returns, adding up the counts into a progress line, until
 * the server says there is no more, or the operator stops it). Each is confirmed first, with the
 * count and the sentence about provider calls.
 */
import { useQueryClient } from '@tanstack/react-query';
import { useRef, useState } from 'react';
import type {
  BulkAction,
  BulkRequest,
  BulkResponse,
  RunRow,
  RunsFilter,
} from '../../../src/shared/api.ts';
import { post } from '../api.ts';
import { formatNumber } from '../format.tsx';
import { useMeta } from '../meta.ts';
import { ConfirmDialog, ErrorBox, Notice } from './common.tsx';

interface Progress {
  processed: number;
  changed: number;
  skipped: number;
  failed: BulkResponse['failed'];
  done: boolean;
}

type Target = { kind: 'ids'; ids: string[] } | { kind: 'filter'; filter: RunsFilter };

const LABEL: Record<BulkAction, string> = { retryAll: 'Retry failed nodes', cancel: 'Cancel' };

/** Retry / cancel runs; `selected` are the checked rows of this page, `filter` the list's filter. */
export function BulkBar({
  selected,
  rows,
  filter,
  exactCount,
  onDone,
}: {
  selected: ReadonlySet<string>;
  rows: RunRow[];
  filter: RunsFilter;
  /** How many runs the filter matches when it is known exactly (one page, no next). */
  exactCount: number | null;
  onDone: () => void;
}) {
  const meta = useMeta();
  const qc = useQueryClient();
  const [pending, setPending] = useState<{ action: BulkAction; target: Target } | null>(null);
  const [progress, setProgress] = useState<Progress | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  const stop = useRef(false);

  if (!meta.can.retry && !meta.can.cancel) return null;

  const chosen = rows.filter((r) => selected.has(r.runId));
  const retryable = chosen.filter((r) => r.state === 'failed' || r.state === 'cancelled').length;
  const cancellable = chosen.filter((r) => r.state === 'running').length;

  const run = async () => {
    if (!pending) return;
    setBusy(true);
    setError(null);
    stop.current = false;
    const total: Progress = { processed: 0, changed: 0, skipped: 0, failed: [], done: false };
    setProgress({ ...total });
    try {
      let cursor: string | undefined;
      for (;;) {
        const body: BulkRequest =
          pending.target.kind === 'ids'
            ? { action: pending.action, ids: pending.target.ids }
            : {
                action: pending.action,
                filter: pending.target.filter,
                ...(cursor ? { cursor } : {}),
                ...(exactCount !== null && !cursor ? { expect: exactCount } : {}),
              };
        const res = await post<BulkResponse>('/runs/bulk', body);
        total.processed += res.processed;
        total.changed += res.changed;
        total.skipped += res.skipped;
        total.failed = [...total.failed, ...res.failed];
        setProgress({ ...total });
        if (!res.next || pending.target.kind === 'ids' || stop.current) break;
        cursor = res.next;
      }
      total.done = true;
      setProgress({ ...total });
      onDone();
    } catch (e) {
      setError(e);
    } finally {
      setBusy(false);
      await qc.invalidateQueries();
    }
  };

  const open = (action: BulkAction, target: Target) => {
    setProgress(null);
    setError(null);
    setPending({ action, target });
  };

  const describe = (p: { action: BulkAction; target: Target }) =>
    p.target.kind === 'ids'
      ? `${formatNumber(p.target.ids.length)} selected run${p.target.ids.length === 1 ? '' : 's'}`
      : exactCount !== null
        ? `the ${formatNumber(exactCount)} run${exactCount === 1 ? '' : 's'} matching the filter`
        : `every run matching the filter (newest first, ${formatNumber(meta.limits.maxBulk)} per step, more than this page holds)`;

  return (
    <div className="bulkbar" data-testid="bulkbar">
      {meta.can.retry ? (
        <button
          type="button"
          disabled={retryable === 0}
          onClick={() => open('retryAll', { kind: 'ids', ids: [...selected] })}
          data-testid="bulk-retry-selected"
          title="Reopens the discarded and cancelled nodes of the selected failed or cancelled runs"
        >
          Retry failed nodes ({retryable})
        </button>
      ) : null}
      {meta.can.cancel ? (
        <button
          type="button"
          className="danger"
          disabled={cancellable === 0}
          onClick={() => open('cancel', { kind: 'ids', ids: [...selected] })}
          data-testid="bulk-cancel-selected"
        >
          Cancel ({cancellable})
        </button>
      ) : null}
      <span className="sep" />
      {meta.can.retry ? (
        <button
          type="button"
          onClick={() => open('retryAll', { kind: 'filter', filter })}
          data-testid="bulk-retry-filter"
        >
          Retry all matching…
        </button>
      ) : null}
      {meta.can.cancel ? (
        <button
          type="button"
          className="danger"
          onClick={() => open('cancel', { kind: 'filter', filter })}
          data-testid="bulk-cancel-filter"
        >
          Cancel all matching…
        </button>
      ) : null}

      <ConfirmDialog
        open={pending !== null}
        title={pending ? `${LABEL[pending.action]}: ${describe(pending)}` : ''}
        confirmLabel={progress?.done ? 'Run again' : LABEL[pending?.action ?? 'retryAll']}
        danger={pending?.action === 'cancel'}
        busy={busy}
        onConfirm={run}
        onClose={() => {
          if (busy) {
            stop.current = true;
            return;
          }
          setPending(null);
        }}
      >
        <p>
          {pending?.action === 'cancel'
            ? 'Cancelling stops every unfinished node of each running run; runs already finished are skipped.'
            : 'Every discarded or cancelled node of each run is reopened in place; runs with nothing to retry are skipped.'}
        </p>
        {pending?.target.kind === 'filter' ? (
          <p className="mono small">filter: {JSON.stringify(pending.target.filter)}</p>
        ) : null}
        {pending?.action === 'retryAll' ? <Notice /> : null}
        {progress ? (
          <div className="progress" data-testid="bulk-progress" data-done={progress.done}>
            <progress
              max={pending?.target.kind === 'ids' ? pending.target.ids.length : undefined}
              value={pending?.target.kind === 'ids' ? progress.processed : undefined}
            />
            <span>
              {formatNumber(progress.processed)} processed · {formatNumber(progress.changed)}{' '}
              changed · {formatNumber(progress.skipped)} skipped · {progress.failed.length} failed
              {progress.done ? ' — done' : busy ? '…' : ' — stopped'}
            </span>
            {progress.failed.length > 0 ? (
              <ul className="small">
                {progress.failed.slice(0, 20).map((f) => (
                  <li key={f.runId} className="mono">
                    {f.runId}: {f.error} {f.message}
                  </li>
                ))}
              </ul>
            ) : null}
          </div>
        ) : null}
        <ErrorBox error={error} />
      </ConfirmDialog>
    </div>
  );
}
