/**
 * Concurrency and rate limits, as the server lists them (their shape depends on the connected
 * core, so each item shows as its fields).
 */
import { useQuery } from '@tanstack/react-query';
import { get } from '../api.ts';
import { Empty, ErrorBox, PageHeader } from '../components/common.tsx';
import { useMeta } from '../meta.ts';
import { usePoll } from '../settings.tsx';

function cell(v: unknown): string {
  if (v === null || v === undefined) return '—';
  return typeof v === 'object' ? JSON.stringify(v) : String(v);
}

/** The limits page. */
export function Limits() {
  const meta = useMeta();
  const q = useQuery({
    queryKey: ['limits'],
    queryFn: () => get<{ items: Record<string, unknown>[] }>('/limits'),
    refetchInterval: usePoll(2),
    enabled: meta.features.limits,
  });
  const items = q.data?.items ?? [];
  const columns = [...new Set(items.flatMap((i) => Object.keys(i)))];
  return (
    <div className="page" data-testid="page-limits">
      <PageHeader title="Limits" />
      {!meta.features.limits ? (
        <Empty>The connected Cyclone has no concurrency or rate limits to show.</Empty>
      ) : null}
      <ErrorBox error={q.error} />
      {q.data && items.length === 0 ? <Empty>No limit is in use.</Empty> : null}
      {items.length > 0 ? (
        <table className="table">
          <thead>
            <tr>
              {columns.map((c) => (
                <th key={c}>{c}</th>
              ))}
            </tr>
          </thead>
          <tbody>
            {items.map((item, i) => (
              // biome-ignore lint/suspicious/noArrayIndexKey: rows have no id of their own
              <tr key={i}>
                {columns.map((c) => (
                  <td key={c}>{cell(item[c])}</td>
                ))}
              </tr>
            ))}
          </tbody>
        </table>
      ) : null}
    </div>
  );
}
