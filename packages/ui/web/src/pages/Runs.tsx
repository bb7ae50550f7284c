/**
 * The runs list: filters (state, workflow, created from/to) kept in the URL, keyset paging
 * (newer / older, no page numbers and no total count: the table may hold millions of runs),
 * row selection with bulk actions. Polling pauses while rows are selected, so the rows the
 * operator checked stay put.
 */
import { keepPreviousData, useQuery } from '@tanstack/react-query';
import { useMemo, useState } from 'react';
import { useSearchParams } from 'wouter';
import {
  RUN_STATES,
  type RunState,
  type RunsFilter,
  type RunsResponse,
  type WorkflowsResponse,
} from '../../../src/shared/api.ts';
import { get } from '../api.ts';
import { BulkBar } from '../components/BulkBar.tsx';
import { Empty, ErrorBox, PageHeader } from '../components/common.tsx';
import { RunTable } from '../components/RunTable.tsx';
import { usePoll } from '../settings.tsx';

/** `datetime-local` value (browser zone) ⇄ ISO instant. */
function toIso(local: string): string | undefined {
  if (!local) return undefined;
  const d = new Date(local);
  return Number.isNaN(d.getTime()) ? undefined : d.toISOString();
}
function toLocalInput(iso: string | null): string {
  if (!iso) return '';
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return '';
  const off = d.getTimezoneOffset() * 60_000;
  return new Date(d.getTime() - off).toISOString().slice(0, 16);
}

/** The runs page. */
export function Runs() {
  const [params, setParams] = useSearchParams();
  const [selected, setSelected] = useState<Set<string>>(new Set());
  const state = (params.get('state') ?? '') as RunState | '';
  const workflow = params.get('workflow') ?? '';
  const from = params.get('from');
  const to = params.get('to');
  const cursor = params.get('cursor') ?? undefined;
  const dir = (params.get('dir') ?? 'older') as 'older' | 'newer';

  const filter: RunsFilter = useMemo(
    () => ({
      ...(state ? { state } : {}),
      ...(workflow ? { workflow } : {}),
      ...(from ? { from } : {}),
      ...(to ? { to } : {}),
    }),
    [state, workflow, from, to],
  );

  const poll = usePoll(1, selected.size > 0);
  const runs = useQuery({
    queryKey: ['runs', filter, cursor, dir],
    queryFn: () => get<RunsResponse>('/runs', { ...filter, cursor, dir, limit: 50 }),
    refetchInterval: poll,
    placeholderData: keepPreviousData,
  });
  const workflows = useQuery({
    queryKey: ['workflows'],
    queryFn: () => get<WorkflowsResponse>('/workflows'),
    staleTime: 30_000,
  });

  /** Sets (or, with '' / null, removes) URL parameters; any filter change returns to page one. */
  const setParam = (patch: Record<string, string | null | undefined>, keepCursor = false) => {
    setSelected(new Set());
    setParams((old) => {
      const next = new URLSearchParams(old);
      for (const [k, v] of Object.entries(patch)) {
        if (v) next.set(k, v);
        else next.delete(k);
      }
      if (!keepCursor) {
        next.delete('cursor');
        next.delete('dir');
      }
      return next;
    });
  };

  const items = runs.data?.items ?? [];
  const toggle = (id: string) =>
    setSelected((old) => {
      const next = new Set(old);
      if (next.has(id)) next.delete(id);
      else next.add(id);
      return next;
    });
  const names = workflows.data?.items.map((w) => w.workflow) ?? [];
  if (workflow && !names.includes(workflow)) names.push(workflow);
  const onePage = runs.data && !runs.data.next && !runs.data.prev;

  return (
    <div className="page" data-testid="page-runs">
      <PageHeader title="Runs" />
      <form className="filters" onSubmit={(e) => e.preventDefault()} aria-label="Filters">
        <label>
          State
          <select
            value={state}
            onChange={(e) => setParam({ state: e.target.value })}
            data-testid="filter-state"
          >
            <option value="">any</option>
            {RUN_STATES.map((s) => (
              <option key={s} value={s}>
                {s}
              </option>
            ))}
          </select>
        </label>
        <label>
          Workflow
          <select
            value={workflow}
            onChange={(e) => setParam({ workflow: e.target.value })}
            data-testid="filter-workflow"
          >
            <option value="">any</option>
            {names.map((w) => (
              <option key={w} value={w}>
                {w}
              </option>
            ))}
          </select>
        </label>
        <label>
          Created from
          <input
            type="datetime-local"
            value={toLocalInput(from)}
            onChange={(e) => setParam({ from: toIso(e.target.value) })}
            data-testid="filter-from"
          />
        </label>
        <label>
          to
          <input
            type="datetime-local"
            value={toLocalInput(to)}
            onChange={(e) => setParam({ to: toIso(e.target.value) })}
            data-testid="filter-to"
          />
        </label>
        {state || workflow || from || to ? (
          <button
            type="button"
            onClick={() => setParam({ state: null, workflow: null, from: null, to: null })}
          >
            Clear filters
          </button>
        ) : null}
      </form>

      <BulkBar
        selected={selected}
        rows={items}
        filter={filter}
        exactCount={onePage ? items.length : null}
        onDone={() => setSelected(new Set())}
      />

      <ErrorBox error={runs.error} />
      {runs.data && items.length === 0 ? <Empty>No run matches.</Empty> : null}
      {items.length > 0 ? (
        <RunTable
          runs={items}
          selected={selected}
          onToggle={toggle}
          onToggleAll={(on) => setSelected(on ? new Set(items.map((r) => r.runId)) : new Set())}
        />
      ) : null}

      <div className="pager">
        <button
          type="button"
          disabled={!runs.data?.prev && !cursor}
          onClick={() => setParam({ cursor: null, dir: null })}
          data-testid="page-newest"
        >
          « Newest
        </button>
        <button
          type="button"
          disabled={!runs.data?.prev}
          onClick={() => setParam({ cursor: runs.data?.prev, dir: 'newer' }, true)}
          data-testid="page-newer"
        >
          ‹ Newer
        </button>
        <button
          type="button"
          disabled={!runs.data?.next}
          onClick={() => setParam({ cursor: runs.data?.next, dir: 'older' }, true)}
          data-testid="page-older"
        >
          Older ›
        </button>
        {selected.size > 0 ? (
          <span className="muted">
            {selected.size} selected — live updates paused while rows are selected
          </span>
        ) : null}
      </div>
    </div>
  );
}
