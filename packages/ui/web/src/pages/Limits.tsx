/**
 * Concurrency and rate limits, as the server lists them. The fields core's `listLimits` gives
 * (action, kind, key, keyed, limit, periodMs, held, waiting) show under readable headings; a
 * field this page does not know (a newer core) still shows, under its own name, so nothing the
 * server sends is hidden.
 */
import { useQuery } from '@tanstack/react-query';
import { get } from '../api.ts';
import { Empty, ErrorBox, PageHeader } from '../components/common.tsx';
import { formatDuration, formatNumber } from '../format.tsx';
import { useMeta } from '../meta.ts';
import { usePoll } from '../settings.tsx';

type Item = Record<string, unknown>;

/** A known field: its heading, what the heading's tooltip explains, and how a cell shows it. */
interface Column {
  label: string;
  help: string;
  show: (item: Item) => string;
}

const num = (v: unknown): string => (typeof v === 'number' ? formatNumber(v) : cell(v));

/**
 * The key cell: the key; for a limit with a key and no key in use (`keyed`, key null), saying
 * so; for a limit without a key, that it counts the whole action.
 */
function keyCell(item: Item): string {
  if (typeof item.key === 'string') return item.key;
  return item.keyed === true ? 'no key in use' : 'whole action';
}

/** The fields of `listLimits`, in the order they show. `keyed` shows within the key's cell. */
const KNOWN: Record<string, Column> = {
  action: { label: 'Action', help: 'The limited action', show: (i) => cell(i.action) },
  kind: {
    label: 'Limit type',
    help: 'Concurrency (steps running at once) or rate (starts per period)',
    show: (i) =>
      i.kind === 'concurrency' ? 'Concurrency' : i.kind === 'rate' ? 'Rate' : cell(i.kind),
  },
  key: {
    label: 'Key',
    help: "A limit with a key has one row per key in use; 'whole action' is a limit without a key",
    show: keyCell,
  },
  limit: {
    label: 'Limit',
    help: 'The most steps the limit lets through',
    show: (i) => num(i.limit),
  },
  periodMs: {
    label: 'Period',
    help: "A rate limit's window",
    show: (i) => (typeof i.periodMs === 'number' ? formatDuration(i.periodMs) : '—'),
  },
  held: {
    label: 'In use',
    help: 'Concurrency: steps running now. Rate: starts in the window that ends now',
    show: (i) => num(i.held),
  },
  waiting: {
    label: 'Waiting',
    help: 'Steps due and not started (counted up to a cap per action)',
    show: (i) => num(i.waiting),
  },
};

/** Fields folded into another column's cell, so they get no column of their own. */
const FOLDED = new Set(['keyed']);

function cell(v: unknown): string {
  if (v === null || v === undefined) return '—';
  return typeof v === 'object' ? JSON.stringify(v) : String(v);
}

/** The known columns first, in their order, then any field the page does not know. */
function columnsOf(items: Item[]): [string, Column][] {
  const fields = new Set(items.flatMap((i) => Object.keys(i)));
  const known = Object.entries(KNOWN).filter(([f]) => fields.has(f));
  const other = [...fields]
    .filter((f) => !(f in KNOWN) && !FOLDED.has(f))
    .map((f): [string, Column] => [f, { label: f, help: f, show: (i) => cell(i[f]) }]);
  return [...known, ...other];
}

/** The limits page. */
export function Limits() {
  const meta = useMeta();
  const q = useQuery({
    queryKey: ['limits'],
    queryFn: () => get<{ items: Item[] }>('/limits'),
    refetchInterval: usePoll(2),
    enabled: meta.features.limits,
  });
  const items = q.data?.items ?? [];
  const columns = columnsOf(items);
  return (
    <div className="page" data-testid="page-limits">
      <PageHeader title="Limits" />
      {!meta.features.limits ? (
        <Empty>The connected Cyclone has no concurrency or rate limits to show.</Empty>
      ) : null}
      <ErrorBox error={q.error} />
      {q.data && items.length === 0 ? (
        <Empty>No limit is recorded (a worker records its actions' limits when it starts).</Empty>
      ) : null}
      {items.length > 0 ? (
        <table className="table" data-testid="limits-table">
          <thead>
            <tr>
              {columns.map(([f, c]) => (
                <th key={f} title={c.help}>
                  {c.label}
                </th>
              ))}
            </tr>
          </thead>
          <tbody>
            {items.map((item, i) => (
              // biome-ignore lint/suspicious/noArrayIndexKey: rows have no id of their own
              <tr key={i} data-action={cell(item.action)}>
                {columns.map(([f, c]) => (
                  <td key={f}>{c.show(item)}</td>
                ))}
              </tr>
            ))}
          </tbody>
        </table>
      ) : null}
    </div>
  );
}
