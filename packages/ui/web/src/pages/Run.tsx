/**
 * One run: its header (workflow, state, submit key, times, steps left), the actions (retry
 * failed nodes, cancel, send a signal), its DAG (lazy chunk) or the node list, its input, and the
 * node panel when a node is chosen (the URL names it, so the panel can be linked to).
 */
import { useMutation, useQuery, useQueryClient } from '@tanstack/react-query';
import { lazy, Suspense, useState } from 'react';
import { Link, useLocation } from 'wouter';
import type {
  CancelResponse,
  RetryResponse,
  RunResponse,
  StepSummary,
} from '../../../src/shared/api.ts';
import { apiUrl, get, post, seg } from '../api.ts';
import { ConfirmDialog, ErrorBox, Notice, PageHeader, StateBadge } from '../components/common.tsx';
import { PayloadView } from '../components/payload.tsx';
import { between, formatDuration, stepDuration, Time } from '../format.tsx';
import { useMeta } from '../meta.ts';
import { usePoll } from '../settings.tsx';
import { NodePanel } from './NodePanel.tsx';

const Dag = lazy(() => import('../dag/Dag.tsx'));

/** Above this many nodes the list shows first; the graph is drawn on request. */
const GRAPH_FIRST_MAX = 300;

/** Rows the node list draws at first and per "show more" (thousands of rows stall each poll). */
const LIST_PAGE = 200;

/** A path parameter, decoded once more (the router leaves reserved characters escaped). */
function safeDecode(s: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}

function StepList({
  runId,
  steps,
  selected,
}: {
  runId: string;
  steps: StepSummary[];
  selected: string | undefined;
}) {
  const [limit, setLimit] = useState(LIST_PAGE);
  const rows = steps.length > limit ? steps.slice(0, limit) : steps;
  return (
    <>
      <table className="table" data-testid="step-list">
        <thead>
          <tr>
            <th>Node</th>
            <th>Action</th>
            <th>State</th>
            <th className="num">Attempt</th>
            <th>Started</th>
            <th className="num">Duration</th>
            <th>Last error</th>
            <th className="num">Ledger</th>
          </tr>
        </thead>
        <tbody>
          {rows.map((s) => (
            <tr
              key={s.node}
              data-node={s.node}
              data-state={s.state}
              className={s.node === selected ? 'selected' : undefined}
            >
              <td className="mono">
                <Link href={`/runs/${seg(runId)}/nodes/${seg(s.node)}`}>{s.node}</Link>
              </td>
              <td>{s.waitFor === null ? s.action : `${s.action} (signal ${s.waitFor})`}</td>
              <td>
                <StateBadge state={s.state} />
              </td>
              <td className="num">
                {s.attempt}/{s.maxAttempts}
              </td>
              <td>
                <Time iso={s.startedAt} />
              </td>
              <td className="num">{formatDuration(stepDuration(s))}</td>
              <td className="ellipsis" title={s.lastError ?? ''}>
                {s.lastError ?? <span className="muted">—</span>}
              </td>
              <td className="num">
                {s.ledger.succeeded + s.ledger.failed + s.ledger.started + s.ledger.unknown || '—'}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      {steps.length > rows.length ? (
        <p className="muted" data-testid="step-list-more">
          {rows.length} of {steps.length} nodes shown.{' '}
          <button type="button" onClick={() => setLimit(limit + LIST_PAGE)}>
            Show {Math.min(LIST_PAGE, steps.length - rows.length)} more
          </button>
        </p>
      ) : null}
    </>
  );
}

/** The run page; `node` opens the node panel. */
export function RunPage({ id: rawId, node: rawNode }: { id: string; node?: string }) {
  const id = safeDecode(rawId);
  const node = rawNode === undefined ? undefined : safeDecode(rawNode);
  const meta = useMeta();
  const qc = useQueryClient();
  const [, navigate] = useLocation();
  const [view, setView] = useState<'graph' | 'list' | null>(null);
  const [action, setAction] = useState<'retryAll' | 'cancel' | null>(null);
  // What the last action did, as the server said it (its `notice`), until another is chosen.
  const [done, setDone] = useState<string | null>(null);

  const poll = usePoll();
  const run = useQuery({
    queryKey: ['run', id],
    queryFn: () => get<RunResponse>(`/runs/${seg(id)}`),
    // Fast while running; a finished run only changes by an operator's action (slow poll).
    refetchInterval: (q) =>
      poll === false ? false : q.state.data?.run.state === 'running' ? poll : poll * 5,
  });

  const act = useMutation({
    mutationFn: (a: 'retryAll' | 'cancel'): Promise<CancelResponse | RetryResponse> =>
      a === 'cancel'
        ? post<CancelResponse>(`/runs/${seg(id)}/cancel`, {})
        : post<RetryResponse>(`/runs/${seg(id)}/retry`, { all: true }),
    onSuccess: async (answer) => {
      setAction(null);
      setDone(answer.notice);
      await qc.invalidateQueries();
    },
  });

  const r = run.data?.run;
  const steps = run.data?.steps ?? [];
  const shown = view ?? (steps.length > GRAPH_FIRST_MAX ? 'list' : 'graph');
  const retryable = steps.filter((s) => s.state === 'discarded' || s.state === 'cancelled');
  const runPoll = r?.state === 'running' ? poll : false;

  return (
    <div className={node ? 'page with-panel' : 'page'} data-testid="page-run">
      <PageHeader
        title={
          <>
            Run <span className="mono">{id}</span>
          </>
        }
      >
        {r && meta.can.retry && retryable.length > 0 ? (
          <button
            type="button"
            className="primary"
            onClick={() => {
              setDone(null);
              setAction('retryAll');
            }}
            data-testid="retry-all"
          >
            Retry failed nodes ({retryable.length})
          </button>
        ) : null}
        {r && meta.can.cancel && r.state === 'running' ? (
          <button
            type="button"
            className="danger"
            onClick={() => {
              setDone(null);
              setAction('cancel');
            }}
            data-testid="cancel-run"
          >
            Cancel run
          </button>
        ) : null}
        {r && meta.can.signal && meta.features.signals && r.state === 'running' ? (
          <Link href={`/signals?run=${seg(id)}`} className="button">
            Send a signal
          </Link>
        ) : null}
      </PageHeader>
      <ErrorBox error={run.error} />
      {done ? (
        <p className="notice" role="status" data-testid="action-notice">
          {done}
        </p>
      ) : null}
      {r ? (
        <dl className="fields run-fields" data-testid="run-header">
          <dt>Workflow</dt>
          <dd>
            <Link href={`/runs?workflow=${seg(r.workflow)}`}>{r.workflow}</Link>
          </dd>
          <dt>State</dt>
          <dd data-testid="run-state" data-state={r.state}>
            <StateBadge state={r.state} />
          </dd>
          <dt>Submit key</dt>
          <dd className="mono">{r.submitKey ?? <span className="muted">—</span>}</dd>
          <dt>Created</dt>
          <dd>
            <Time iso={r.createdAt} />
          </dd>
          <dt>Finished</dt>
          <dd>
            <Time iso={r.completedAt} />
          </dd>
          <dt>Duration</dt>
          <dd>{formatDuration(between(r.createdAt, r.completedAt))}</dd>
          <dt>Steps left</dt>
          <dd>
            {r.stepsRemaining} of {r.stepsTotal}
          </dd>
        </dl>
      ) : null}

      {r ? (
        <div className="run-body">
          <div className="run-main">
            <div className="tabs" role="tablist">
              <button
                type="button"
                role="tab"
                aria-selected={shown === 'graph'}
                onClick={() => setView('graph')}
                data-testid="view-graph"
              >
                Graph
              </button>
              <button
                type="button"
                role="tab"
                aria-selected={shown === 'list'}
                onClick={() => setView('list')}
                data-testid="view-list"
              >
                List
              </button>
              {run.data?.truncated ? (
                <span className="muted" data-testid="steps-truncated">
                  Only the first {steps.length} of {r.stepsTotal} nodes are shown.
                </span>
              ) : null}
            </div>
            {steps.length > GRAPH_FIRST_MAX ? (
              <p className="muted" data-testid="graph-large-note">
                {shown === 'list'
                  ? `This run has ${r.stepsTotal} nodes: the list shows first, as a graph this large takes long to draw.`
                  : `Drawing ${steps.length} nodes; the list view is quicker.`}
              </p>
            ) : null}
            {shown === 'graph' ? (
              <Suspense fallback={<div className="dag loading">Loading the graph…</div>}>
                <Dag
                  steps={steps}
                  selected={node}
                  onSelect={(n) => navigate(`/runs/${seg(id)}/nodes/${seg(n)}`)}
                />
              </Suspense>
            ) : (
              <StepList runId={id} steps={steps} selected={node} />
            )}
            <details className="run-input">
              <summary>Run input</summary>
              <PayloadView
                payload={r.input}
                label="input"
                downloadHref={apiUrl(`/runs/${seg(id)}/input`, { raw: 1 })}
              />
            </details>
          </div>
          {node ? (
            <NodePanel
              key={node}
              runId={id}
              node={node}
              runState={r.state}
              runVersion={`${r.state}|${r.updatedAt}|${r.stepsRemaining}`}
              poll={runPoll}
              onClose={() => navigate(`/runs/${seg(id)}`)}
            />
          ) : null}
        </div>
      ) : null}

      <ConfirmDialog
        open={action !== null}
        title={action === 'cancel' ? 'Cancel this run' : 'Retry the failed nodes of this run'}
        confirmLabel={action === 'cancel' ? 'Cancel run' : 'Retry failed nodes'}
        danger={action === 'cancel'}
        busy={act.isPending}
        onConfirm={() => action && act.mutate(action)}
        onClose={() => {
          setAction(null);
          act.reset();
        }}
      >
        {action === 'cancel' ? (
          <p>
            Every unfinished node is cancelled and running handlers are told to stop. Completed
            nodes keep their output; the run can be retried later.
          </p>
        ) : (
          <p>
            Reopens {retryable.map((s) => s.node).join(', ')} in place with fresh attempts; the run
            goes back to running.
          </p>
        )}
        {action === 'retryAll' ? <Notice /> : null}
        <ErrorBox error={act.error} />
      </ConfirmDialog>
    </div>
  );
}
