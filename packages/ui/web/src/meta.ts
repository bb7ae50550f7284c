/**
 * What the server says about this UI (GET /api/meta): rights, read-only, which optional parts the
 * connected core has. Until it answers, the config block rendered into the page stands in, with
 * every optional part assumed present.
 */
import { useQuery } from '@tanstack/react-query';
import type { MetaResponse } from '../../src/shared/api.ts';
import { get } from './api.ts';
import { config } from './config.ts';

const initial: MetaResponse = {
  ...config,
  features: {
    schedules: true,
    signals: true,
    limits: false,
    workers: true,
    throughput: true,
    ledger: true,
  },
  limits: { maxBulk: 1000, previewBytes: 65_536, pageMax: 200, bulkIdsMax: 500 },
};

/** The meta answer (or the stand-in), refreshed every minute. */
export function useMeta(): MetaResponse {
  const q = useQuery({
    queryKey: ['meta'],
    queryFn: () => get<MetaResponse>('/meta'),
    staleTime: 60_000,
    refetchInterval: 60_000,
    retry: false,
  });
  const m = q.data ?? initial;
  // Read-only wins over whatever rights a hook grants: the server refuses those actions anyway.
  if (m.readOnly)
    return { ...m, can: { retry: false, cancel: false, signal: false, schedules: false } };
  return m;
}
