/**
 * The node panel of a run: the step's state and timing, its failed attempts (newest first,
 * stacks folded), its output (a preview and a download), and the ledger entries of its provider
 * calls — what proves a retry will not call a provider again for a call recorded as succeeded.
 */
import { useMutation, useQuery, useQueryClient } from '@tanstack/react-query';
import { type ReactNode, useEffect, useState } from 'react';
import { Link } from 'wouter';
import type {
  LedgerEntry,
  LedgerResponse,
  RetryResponse,
  RunState,
  StepResponse,
} from '../../../src/shared/api.ts';
import { apiUrl, get, post, seg } from '../api.ts';
import { ConfirmDialog, ErrorBox, Notice, StateBadge } from '../components/common.tsx';
import { PayloadView } from '../components/payload.tsx';
import { formatDuration, stepDuration, Time } from '../format.tsx';
import { useMeta } from '../meta.ts';

function Field({ label, children }: { label: string; children: ReactNode }) {
  return (
    <>
      <dt>{label}</dt>
      <dd>{children}</dd>
    </>
  );
}

function NodeList({ runId, nodes }: { runId: string; nodes: string[] }) {
  if (nodes.length === 0) return <span className="muted">—</span>;
  return (
    <span className="node-list">
      {nodes.map((n) => (
        <Link key={n} href={`/runs/${seg(runId)}/nodes/${seg(n)}`}>
          {n}
        </Link>
      ))}
    </span>
  );
}

/** The ledger rows of one node. */
export function LedgerTable({ items }: { items: LedgerEntry[] }) {
  if (items.length === 0)
    return <p className="muted">No provider call of this node is in the ledger.</p>;
  return (
    <table className="table compact" data-testid="ledger-table">
      <thead>
        <tr>
          <th>Key</th>
          <th>Provider</th>
          <th>Phase</th>
          <th className="num">Calls</th>
          <th>Provider ref</th>
          <th>Updated</th>
        </tr>
      </thead>
      <tbody>
        {items.map((e) => [
          <tr key={e.key} data-phase={e.phase} data-testid="ledger-row">
            <td className="mono small" title={e.key}>
              {e.scope ? `…:${e.scope}` : e.key.split(':').slice(1).join(':') || e.key}
            </td>
            <td>
              {e.provider ?? '—'}
              {e.operation ? <span className="muted small"> {e.operation}</span> : null}
            </td>
            <td>
              <span className={`badge phase-${e.phase}`}>{e.phase}</span>
            </td>
            <td className="num">{e.calls}</td>
            <td className="mono small">{e.providerRef ?? '—'}</td>
            <td>
              <Time iso={e.updatedAt} />
            </td>
          </tr>,
          e.result || e.error ? (
            <tr key={`${e.key}/answer`} className="ledger-answer">
              <td colSpan={6}>
                <details>
                  <summary>what the provider answered</summary>
                  {e.result ? <PayloadView payload={e.result} label="result" /> : null}
                  {e.error ? <PayloadView payload={e.error} label="error" /> : null}
                </details>
              </td>
            </tr>
          ) : null,
        ])}
      </tbody>
    </table>
  );
}

/**
 * The panel of `node` in run `runId`; polls at `poll`, and reads again whenever the run changes
 * (`runVersion`: its state, updatedAt and steps left): the change that finishes a run also stops
 * the polling, and the panel must still show it.
 */
export function NodePanel({
  runId,
  node,
  runState,
  runVersion,
  poll,
  onClose,
}: {
  runId: string;
  node: string;
  runState: RunState | undefined;
  runVersion: string | undefined;
  poll: number | false;
  onClose: () => void;
}) {
  const meta = useMeta();
  const qc = useQueryClient();
  const [confirm, setConfirm] = useState(false);
  const step = useQuery({
    queryKey: ['step', runId, node],
    queryFn: () => get<StepResponse>(`/runs/${seg(runId)}/steps/${seg(node)}`),
    refetchInterval: poll,
  });
  const ledger = useQuery({
    queryKey: ['ledger', runId, node],
    queryFn: () => get<LedgerResponse>(`/runs/${seg(runId)}/ledger`, { node }),
    refetchInterval: poll,
    enabled: meta.features.ledger,
  });
  // biome-ignore lint/correctness/useExhaustiveDependencies: runVersion is the trigger
  useEffect(() => {
    void qc.invalidateQueries({ queryKey: ['step', runId, node] });
    void qc.invalidateQueries({ queryKey: ['ledger', runId, node] });
  }, [qc, runId, node, runVersion]);
  const retry = useMutation({
    mutationFn: () => post<RetryResponse>(`/runs/${seg(runId)}/retry`, { node }),
    onSuccess: async () => {
      setConfirm(false);
      await qc.invalidateQueries();
    },
  });

  const s = step.data?.step;
  const canRetry =
    meta.can.retry && s !== undefined && (s.state === 'discarded' || s.state === 'cancelled');

  return (
    <aside className="panel" aria-label={`Node ${node}`} data-testid="node-panel">
      <div className="panel-head">
        <h2 className="mono">{node}</h2>
        {s ? <StateBadge state={s.state} /> : null}
        <button type="button" className="close" onClick={onClose} aria-label="Close the panel">
          ×
        </button>
      </div>
      <ErrorBox error={step.error} />
      {s ? (
        <>
          {canRetry ? (
            <div className="panel-actions">
              <button
                type="button"
                className="primary"
                onClick={() => setConfirm(true)}
                data-testid="retry-node"
              >
                Retry this node
              </button>
            </div>
          ) : null}
          <dl className="fields">
            <Field label="Action">{s.action}</Field>
            {s.waitFor !== null ? (
              <Field label="Signal">
                <span data-testid="panel-wait-for">
                  <span className="mono">{s.waitFor}</span>
                  {s.waitDeadline ? (
                    <>
                      {' '}
                      · times out at <Time iso={s.waitDeadline} />
                    </>
                  ) : (
                    ' · no timeout'
                  )}
                </span>
              </Field>
            ) : null}
            <Field label="Attempt">
              {s.attempt} of {s.maxAttempts}
              {s.snoozes > 0 ? ` · ${s.snoozes} snoozes` : ''}
              {s.reopenedAfterAttempt != null
                ? ` · reopened by an operator after attempt ${s.reopenedAfterAttempt}`
                : ''}
            </Field>
            <Field label="Scheduled">
              <Time iso={s.scheduledAt} />
            </Field>
            <Field label="Started">
              <Time iso={s.startedAt} />
            </Field>
            <Field label="Completed">
              <Time iso={s.completedAt} />
            </Field>
            <Field label="Duration">{formatDuration(stepDuration(s))}</Field>
            <Field label="Lease">
              {s.leaseOwner ? (
                <>
                  <span className="mono">{s.leaseOwner}</span> until <Time iso={s.leaseExpiresAt} />
                </>
              ) : (
                <span className="muted">—</span>
              )}
            </Field>
            <Field label="Upstream">
              <NodeList runId={runId} nodes={s.upstream} />
            </Field>
            <Field label="Downstream">
              <NodeList runId={runId} nodes={s.downstream} />
            </Field>
          </dl>

          <h3>Errors {s.errorCount > 0 ? `(${s.errorCount})` : ''}</h3>
          {s.errors.length === 0 ? (
            <p className="muted">No failed attempt.</p>
          ) : (
            <ol className="errors" data-testid="errors">
              {s.errors.map((e, i) => (
                // biome-ignore lint/suspicious/noArrayIndexKey: entries have no id; the list is replaced whole
                <li key={i} className="error-entry">
                  <div>
                    <strong>attempt {e.attempt ?? '?'}</strong>
                    {e.kind ? <span className="mono"> · {e.kind}</span> : null} ·{' '}
                    <Time iso={e.at} />
                  </div>
                  <div className="error-message">{e.message}</div>
                  {e.stack ? (
                    <details>
                      <summary>stack</summary>
                      <pre className="stack">{e.stack}</pre>
                    </details>
                  ) : null}
                </li>
              ))}
            </ol>
          )}

          <h3>Output</h3>
          <PayloadView
            payload={s.output}
            label="output"
            downloadHref={
              s.output ? apiUrl(`/runs/${seg(runId)}/steps/${seg(node)}/output`) : undefined
            }
          />

          <h3>Ledger: provider calls</h3>
          <ErrorBox error={ledger.error} />
          {ledger.data ? <LedgerTable items={ledger.data.items} /> : null}
        </>
      ) : null}

      <ConfirmDialog
        open={confirm}
        title={`Retry node ${node}`}
        confirmLabel="Retry this node"
        busy={retry.isPending}
        onConfirm={() => retry.mutate()}
        onClose={() => setConfirm(false)}
      >
        <p>
          The node is reopened in place with fresh attempts
          {runState === 'failed' ? ', and the run goes back to running' : ''}; nodes after it run
          when it completes.
        </p>
        <Notice />
        <ErrorBox error={retry.error} />
      </ConfirmDialog>
    </aside>
  );
}
