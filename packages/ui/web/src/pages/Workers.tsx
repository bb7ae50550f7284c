/**
 * Workers and health: the workers that registered themselves (alive or not seen for a while),
 * what each holds, and the leases on running steps per owner (expired ones are what the recovery
 * sweep will take back).
 */
import { useQuery } from '@tanstack/react-query';
import type { HealthResponse } from '../../../src/shared/api.ts';
import { get } from '../api.ts';
import { Card, Empty, ErrorBox, PageHeader } from '../components/common.tsx';
import { formatCount, formatDuration, Time } from '../format.tsx';
import { useMeta } from '../meta.ts';
import { usePoll } from '../settings.tsx';

/** The workers page. */
export function Workers() {
  const meta = useMeta();
  const q = useQuery({
    queryKey: ['workers'],
    queryFn: () => get<HealthResponse>('/health/workers'),
    refetchInterval: usePoll(),
  });
  const ready = useQuery({
    queryKey: ['ready'],
    queryFn: () => get<{ ok: boolean }>('/health/ready'),
    refetchInterval: usePoll(3),
    retry: false,
  });
  const workers = q.data?.workers ?? [];
  const leases = q.data?.leaseOwners ?? [];
  const due = q.data?.oldestDueByAction ?? [];
  return (
    <div className="page" data-testid="page-workers">
      <PageHeader title="Workers and health" />
      <ErrorBox error={q.error} />
      <div className="stats">
        <div className={`stat ${ready.data?.ok ? 'tone-ok' : 'tone-bad'}`}>
          <span className="stat-value">{ready.data?.ok ? 'ok' : ready.error ? 'down' : '—'}</span>
          <span className="stat-label">database</span>
        </div>
        <div className="stat">
          <span className="stat-value">{workers.filter((w) => w.alive).length}</span>
          <span className="stat-label">workers alive</span>
        </div>
        <div className="stat">
          <span className="stat-value">{workers.reduce((n, w) => n + w.inFlight, 0)}</span>
          <span className="stat-label">steps in flight</span>
        </div>
        <div
          className={`stat ${q.data && q.data.expiredLeases.count > 0 ? 'tone-warn' : ''}`}
          data-testid="stat-expired-leases"
        >
          <span className="stat-value">{formatCount(q.data?.expiredLeases)}</span>
          <span className="stat-label">expired leases</span>
        </div>
        <div className="stat">
          <span className="stat-value">{formatCount(q.data?.retrying)}</span>
          <span className="stat-label">steps retrying</span>
        </div>
        <div className="stat">
          <span className="stat-value">{meta.readOnly ? 'read-only' : 'read-write'}</span>
          <span className="stat-label">this UI{meta.user ? ` · ${meta.user}` : ''}</span>
        </div>
      </div>
      <Card title="Workers">
        {q.data && workers.length === 0 ? <Empty>No worker has registered.</Empty> : null}
        {workers.length > 0 ? (
          <table className="table" data-testid="workers-table">
            <thead>
              <tr>
                <th>Worker</th>
                <th>Host</th>
                <th className="num">PID</th>
                <th>Status</th>
                <th className="num">In flight / concurrency</th>
                <th>Workflows</th>
                <th>Started</th>
                <th>Last seen</th>
              </tr>
            </thead>
            <tbody>
              {workers.map((w) => (
                <tr key={w.workerId} data-alive={w.alive}>
                  <td className="mono small">{w.workerId}</td>
                  <td>{w.host}</td>
                  <td className="num">{w.pid}</td>
                  <td>
                    <span className={`badge ${w.alive ? 'state-completed' : 'state-failed'}`}>
                      {w.alive ? '● alive' : '○ not seen'}
                    </span>
                  </td>
                  <td className="num">
                    {w.inFlight} / {w.concurrency}
                  </td>
                  <td className="small">{w.workflows.join(', ') || '—'}</td>
                  <td>
                    <Time iso={w.startedAt} />
                  </td>
                  <td>
                    <Time iso={w.lastSeenAt} />
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        ) : null}
      </Card>
      <Card title="Leases on running steps">
        {q.data && leases.length === 0 ? <Empty>No step is running.</Empty> : null}
        {leases.length > 0 ? (
          <table className="table" data-testid="leases-table">
            <thead>
              <tr>
                <th>Lease owner</th>
                <th className="num">Running steps</th>
                <th>Next expiry</th>
                <th className="num">Expired</th>
              </tr>
            </thead>
            <tbody>
              {leases.map((l) => (
                <tr key={l.owner}>
                  <td className="mono small">{l.owner}</td>
                  <td className="num">{l.steps}</td>
                  <td>
                    <Time iso={l.nextExpiry} />
                  </td>
                  <td className={`num ${l.expired > 0 ? 'text-bad' : ''}`}>{l.expired}</td>
                </tr>
              ))}
            </tbody>
          </table>
        ) : null}
      </Card>
      <Card title="Oldest due step per action">
        {q.data && due.length === 0 ? <Empty>No step is waiting past its time.</Empty> : null}
        {due.length > 0 ? (
          <table className="table" data-testid="due-table">
            <thead>
              <tr>
                <th>Workflow</th>
                <th>Action</th>
                <th className="num">Due steps</th>
                <th>Oldest due since</th>
                <th className="num">Lag</th>
              </tr>
            </thead>
            <tbody>
              {due.map((d) => (
                <tr key={`${d.workflow}/${d.action}`}>
                  <td>{d.workflow}</td>
                  <td className="mono">{d.action}</td>
                  <td className="num">{d.due}</td>
                  <td>
                    <Time iso={d.oldestDueAt} />
                  </td>
                  <td className="num">{formatDuration(d.lagMs)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        ) : null}
      </Card>
    </div>
  );
}
