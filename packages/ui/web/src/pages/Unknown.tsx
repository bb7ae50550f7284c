/**
 * Provider calls whose outcome is unknown: the ledger says a call started (or was marked unknown)
 * and no answer was recorded, oldest first. Each is a question for the operator — did the charge
 * happen? — answered at the provider, then settled with @cyclone/idempotency's API.
 */
import { useQuery } from '@tanstack/react-query';
import { useState } from 'react';
import { Link } from 'wouter';
import type { UnknownResponse } from '../../../src/shared/api.ts';
import { get, seg } from '../api.ts';
import { Empty, ErrorBox, PageHeader } from '../components/common.tsx';
import { relative, shortId, Time } from '../format.tsx';
import { usePoll } from '../settings.tsx';

const AGES: [string, number][] = [
  ['any age', 0],
  ['older than 1 minute', 60_000],
  ['older than 10 minutes', 600_000],
  ['older than 1 hour', 3_600_000],
];

/** The unknown-outcomes page. */
export function Unknown() {
  const [olderThanMs, setOlder] = useState(0);
  const [cursor, setCursor] = useState<string | undefined>(undefined);
  const [trail, setTrail] = useState<(string | undefined)[]>([]);
  const q = useQuery({
    queryKey: ['unknown', olderThanMs, cursor],
    queryFn: () =>
      get<UnknownResponse>('/unknown', {
        olderThanMs,
        cursor,
        limit: 100,
      }),
    refetchInterval: usePoll(3),
  });
  const items = q.data?.items ?? [];
  return (
    <div className="page" data-testid="page-unknown">
      <PageHeader title="Unknown outcomes">
        <select
          value={olderThanMs}
          onChange={(e) => {
            setOlder(Number(e.target.value));
            setCursor(undefined);
            setTrail([]);
          }}
          aria-label="Age"
        >
          {AGES.map(([label, ms]) => (
            <option key={ms} value={ms}>
              {label}
            </option>
          ))}
        </select>
      </PageHeader>
      <p className="muted">
        Provider calls that started and whose answer was never recorded (a crash or a timeout
        between the call and its record). The ledger keeps their node from calling again until the
        outcome is known: check at the provider (the key is the idempotency key you sent), then
        settle it with <code>resolveKey</code> of @cyclone/idempotency.
      </p>
      <ErrorBox error={q.error} />
      {q.data && items.length === 0 ? (
        <Empty>No provider call with an unknown outcome.</Empty>
      ) : null}
      {items.length > 0 ? (
        <table className="table" data-testid="unknown-table">
          <thead>
            <tr>
              <th>Run</th>
              <th>Node</th>
              <th>Idempotency key</th>
              <th>Provider</th>
              <th>Phase</th>
              <th>Call started</th>
              <th>Age</th>
            </tr>
          </thead>
          <tbody>
            {items.map((e) => (
              <tr key={e.key} data-phase={e.phase}>
                <td className="mono">
                  <Link href={`/runs/${seg(e.runId)}/nodes/${seg(e.node)}`}>
                    {shortId(e.runId)}
                  </Link>
                </td>
                <td className="mono">{e.node}</td>
                <td className="mono small">{e.key}</td>
                <td>
                  {e.provider ?? '—'} <span className="muted small">{e.operation ?? ''}</span>
                </td>
                <td>
                  <span className={`badge phase-${e.phase}`}>{e.phase}</span>
                </td>
                <td>
                  <Time iso={e.callStartedAt ?? e.createdAt} />
                </td>
                <td>{relative(Date.parse(e.callStartedAt ?? e.createdAt) - Date.now())}</td>
              </tr>
            ))}
          </tbody>
        </table>
      ) : null}
      <div className="pager">
        <button
          type="button"
          disabled={trail.length === 0}
          onClick={() => {
            setCursor(trail[trail.length - 1]);
            setTrail(trail.slice(0, -1));
          }}
        >
          ‹ Back
        </button>
        <button
          type="button"
          disabled={!q.data?.next}
          onClick={() => {
            setTrail([...trail, cursor]);
            setCursor(q.data?.next ?? undefined);
          }}
        >
          Next ›
        </button>
      </div>
    </div>
  );
}
