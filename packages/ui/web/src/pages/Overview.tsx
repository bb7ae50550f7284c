/**
 * The overview: runs running and failed, the step queue (ready, retrying, scheduled, its lag),
 * expired leases, unknown provider outcomes, throughput per minute and the newest failed runs.
 */
import { useQuery } from '@tanstack/react-query';
import { useState } from 'react';
import { Link } from 'wouter';
import type {
  Count,
  Overview as OverviewData,
  ThroughputResponse,
} from '../../../src/shared/api.ts';
import { get } from '../api.ts';
import { Card, Empty, ErrorBox, PageHeader } from '../components/common.tsx';
import { RunTable } from '../components/RunTable.tsx';
import { ThroughputChart } from '../components/Throughput.tsx';
import { formatCount, formatDuration, formatNumber } from '../format.tsx';
import { useMeta } from '../meta.ts';
import { usePoll } from '../settings.tsx';

function Stat({
  label,
  value,
  href,
  tone,
  testid,
}: {
  label: string;
  value: string;
  href?: string;
  tone?: 'bad' | 'warn' | 'ok';
  testid: string;
}) {
  const body = (
    <>
      <span className="stat-value">{value}</span>
      <span className="stat-label">{label}</span>
    </>
  );
  return (
    <div className={`stat ${tone ? `tone-${tone}` : ''}`} data-testid={`stat-${testid}`}>
      {href ? <Link href={href}>{body}</Link> : body}
    </div>
  );
}

const toneOf = (c: Count | null | undefined, tone: 'bad' | 'warn') =>
  c && c.count > 0 ? tone : undefined;

/** The overview page. */
export function Overview() {
  const meta = useMeta();
  const poll = usePoll();
  const [span, setSpan] = useState<'1h' | '24h' | '7d'>('1h');
  const overview = useQuery({
    queryKey: ['overview'],
    queryFn: () => get<OverviewData>('/overview'),
    refetchInterval: poll,
  });
  const throughput = useQuery({
    queryKey: ['throughput', span],
    queryFn: () => get<ThroughputResponse>('/stats/throughput', { window: span }),
    refetchInterval: usePoll(5),
    enabled: meta.features.throughput,
  });
  const o = overview.data;

  return (
    <div className="page" data-testid="page-overview">
      <PageHeader title="Overview" />
      <ErrorBox error={overview.error} />
      <div className="stats">
        <Stat
          testid="running"
          label="runs running"
          value={formatCount(o?.runs.running)}
          href="/runs?state=running"
        />
        <Stat
          testid="failed"
          label={`runs failed (${o ? formatCount(o.runs.failedLast24h) : '—'} in 24 h)`}
          value={formatCount(o?.runs.failed)}
          href="/runs?state=failed"
          tone={toneOf(o?.runs.failedLast24h, 'bad')}
        />
        <Stat testid="ready" label="steps ready now" value={formatCount(o?.steps.ready)} />
        <Stat
          testid="retrying"
          label="steps retrying"
          value={formatCount(o?.steps.retrying)}
          tone={toneOf(o?.steps.retrying, 'warn')}
        />
        <Stat testid="scheduled" label="steps scheduled" value={formatCount(o?.steps.scheduled)} />
        <Stat testid="steps-running" label="steps running" value={formatCount(o?.steps.running)} />
        <Stat
          testid="lag"
          label="queue lag (oldest due step)"
          value={o ? (o.steps.queueLagMs <= 0 ? 'none' : formatDuration(o.steps.queueLagMs)) : '—'}
          tone={o && o.steps.queueLagMs > 60_000 ? 'warn' : undefined}
        />
        <Stat
          testid="expired"
          label="expired leases"
          value={formatCount(o?.steps.expiredLeases)}
          href="/workers"
          tone={toneOf(o?.steps.expiredLeases, 'warn')}
        />
        <Stat
          testid="unknown"
          label="unknown provider outcomes"
          value={o?.unknownOutcomes === null ? 'n/a' : formatCount(o?.unknownOutcomes)}
          href="/unknown"
          tone={toneOf(o?.unknownOutcomes, 'bad')}
        />
        <Stat
          testid="workers"
          label="workers alive"
          value={o ? formatNumber(o.workers.alive) : '—'}
          href="/workers"
        />
        <Stat
          testid="total"
          label="runs in total (estimate)"
          value={o && o.runs.estimatedTotal > 0 ? `~${formatNumber(o.runs.estimatedTotal)}` : '—'}
        />
      </div>

      {meta.features.throughput ? (
        <Card
          title={
            <>
              Throughput{' '}
              <select
                value={span}
                onChange={(e) => setSpan(e.target.value as typeof span)}
                aria-label="Window"
              >
                <option value="1h">last hour</option>
                <option value="24h">last 24 hours</option>
                <option value="7d">last 7 days</option>
              </select>
            </>
          }
        >
          <ErrorBox error={throughput.error} />
          {throughput.data ? <ThroughputChart data={throughput.data} /> : null}
        </Card>
      ) : null}

      <Card title="Recent failed runs">
        {o && o.recentFailed.length === 0 ? <Empty>No failed run.</Empty> : null}
        {o && o.recentFailed.length > 0 ? <RunTable runs={o.recentFailed} /> : null}
      </Card>
    </div>
  );
}
