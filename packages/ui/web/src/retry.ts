/**
 * When a page's query asks again after a failure. A server's answer (a 4xx refusal, a 503
 * `query_timeout` or `unavailable`, a 500) is shown at once: asking again would not change it,
 * and retries with their back-off outlast the polling interval, so a statement timeout never
 * reached the error banner (three 5 s attempts and their delays before the query settled). The
 * next poll asks again anyway. Only a failed connection (status 0) is retried, once.
 */
export function retryQuery(failureCount: number, error: unknown): boolean {
  const status = (error as { status?: unknown } | null)?.status;
  if (typeof status === 'number' && status > 0) return false;
  return failureCount < 1;
}
