/**
 * A table of runs (the runs page, the overview's recent failures): id, workflow, state, submit
 * key, steps remaining, created, completed, duration; optional row selection.
 */
import { Link } from 'wouter';
import type { RunRow } from '../../../src/shared/api.ts';
import { between, formatDuration, shortId, Time } from '../format.tsx';
import { StateBadge } from './common.tsx';

/** Rows of runs; `selected`/`onToggle` add a checkbox column. */
export function RunTable({
  runs,
  selected,
  onToggle,
  onToggleAll,
}: {
  runs: RunRow[];
  selected?: ReadonlySet<string>;
  onToggle?: (id: string) => void;
  onToggleAll?: (on: boolean) => void;
}) {
  const selectable = selected !== undefined && onToggle !== undefined;
  const all = selectable && runs.length > 0 && runs.every((r) => selected.has(r.runId));
  return (
    <table className="table" data-testid="runs-table">
      <thead>
        <tr>
          {selectable ? (
            <th className="check">
              <input
                type="checkbox"
                checked={all}
                onChange={(e) => onToggleAll?.(e.target.checked)}
                aria-label="Select every run of this page"
                data-testid="select-all"
              />
            </th>
          ) : null}
          <th>Run</th>
          <th>Workflow</th>
          <th>State</th>
          <th>Submit key</th>
          <th className="num">Steps left</th>
          <th>Created</th>
          <th>Finished</th>
          <th className="num">Duration</th>
        </tr>
      </thead>
      <tbody>
        {runs.map((r) => (
          <tr key={r.runId} data-run-id={r.runId} data-state={r.state}>
            {selectable ? (
              <td className="check">
                <input
                  type="checkbox"
                  checked={selected.has(r.runId)}
                  onChange={() => onToggle(r.runId)}
                  aria-label={`Select run ${r.runId}`}
                />
              </td>
            ) : null}
            <td className="mono">
              <Link href={`/runs/${encodeURIComponent(r.runId)}`} title={r.runId}>
                {shortId(r.runId)}
              </Link>
            </td>
            <td>{r.workflow}</td>
            <td>
              <StateBadge state={r.state} />
            </td>
            <td className="mono ellipsis" title={r.submitKey ?? ''}>
              {r.submitKey ?? <span className="muted">—</span>}
            </td>
            <td className="num">{r.stepsRemaining}</td>
            <td>
              <Time iso={r.createdAt} />
            </td>
            <td>
              <Time iso={r.completedAt} />
            </td>
            <td className="num">
              {r.completedAt ? formatDuration(between(r.createdAt, r.completedAt)) : '—'}
            </td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}
