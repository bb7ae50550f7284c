/**
 * The JSON API client of the pages: GETs and the POSTs of the actions, under the API base the
 * server rendered into the page. Every POST is JSON with the `X-Cyclone-UI` header, which the
 * server requires of mutations (a cross-site form cannot send it).
 */
import { type ApiErrorCode, UI_HEADER, UI_HEADER_VALUE } from '../../src/shared/api.ts';
import { config } from './config.ts';

/** A non-2xx answer of the API, with the server's error code and sentence. */
export class ApiFailure extends Error {
  readonly status: number;
  readonly code: ApiErrorCode | 'network';
  readonly details: unknown;
  constructor(status: number, code: ApiErrorCode | 'network', message: string, details?: unknown) {
    super(message);
    this.name = 'ApiFailure';
    this.status = status;
    this.code = code;
    this.details = details;
  }
}

/** `apiBase` + path; `path` starts with `/`. Query values that are undefined or '' are left out. */
export function apiUrl(path: string, query?: Record<string, string | number | undefined>): string {
  const params = new URLSearchParams();
  for (const [k, v] of Object.entries(query ?? {})) {
    if (v !== undefined && v !== '') params.set(k, String(v));
  }
  const qs = params.toString();
  return `${config.apiBase}${path}${qs ? `?${qs}` : ''}`;
}

/** One path segment, encoded (node names and run ids may hold any character). */
export const seg = (s: string): string => encodeURIComponent(s);

async function failure(res: Response): Promise<ApiFailure> {
  let body: { error?: ApiErrorCode; message?: string; details?: unknown } = {};
  try {
    body = (await res.json()) as typeof body;
  } catch {
    // not JSON (a proxy's error page): the status says enough
  }
  const code = body.error ?? (res.status === 401 ? 'unauthorized' : 'internal');
  return new ApiFailure(
    res.status,
    code,
    body.message ?? `${res.status} ${res.statusText}`,
    body.details,
  );
}

async function send<T>(url: string, init: RequestInit): Promise<T> {
  let res: Response;
  try {
    res = await fetch(url, { credentials: 'same-origin', ...init });
  } catch (e) {
    throw new ApiFailure(0, 'network', `The UI server cannot be reached (${String(e)})`);
  }
  if (!res.ok) throw await failure(res);
  return (await res.json()) as T;
}

/** GET `path` under the API base; rejects with ApiFailure on a non-2xx answer. */
export function get<T>(path: string, query?: Record<string, string | number | undefined>) {
  return send<T>(apiUrl(path, query), { headers: { Accept: 'application/json' } });
}

/** POST a JSON body (an action); rejects with ApiFailure on a non-2xx answer. */
export function post<T>(path: string, body: unknown = {}): Promise<T> {
  return send<T>(apiUrl(path), {
    method: 'POST',
    headers: {
      Accept: 'application/json',
      'Content-Type': 'application/json',
      [UI_HEADER]: UI_HEADER_VALUE,
    },
    body: JSON.stringify(body),
  });
}
