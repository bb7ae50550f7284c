/**
 * The server's own defences, whatever the page shows: the stateless CSRF check on mutations and
 * the response headers. A mutation must be JSON (`Content-Type: application/json`, which a form
 * or a `no-cors` fetch cannot send), carry `X-Cyclone-UI: 1` (a custom header a cross-site page
 * cannot add without a CORS preflight, which this server never approves) and come from this
 * origin (`Sec-Fetch-Site` and `Origin`, when the browser sends them). No cookie or token is
 * involved, so nothing breaks under a base path or over plain HTTP on loopback.
 */
import { ApiFailure } from './errors.js';
import { UI_HEADER, UI_HEADER_VALUE } from './shared/api.js';

/** Methods that change nothing; every other method is a mutation. */
export const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

/**
 * Checks a mutation's request: JSON content type (else 415), the custom header (else 403
 * `csrf`), `Sec-Fetch-Site` same-origin or none when present (else 403 `csrf`), and `Origin`,
 * when present, of this host or one of `trustedOrigins` (else 403 `csrf`). The host compared is
 * the request's own `Host` (a reverse proxy must pass it through; `trustedOrigins` names the
 * public origin otherwise).
 * @throws ApiFailure as above.
 */
export function checkMutation(request: Request, trustedOrigins: ReadonlySet<string>): void {
  const type = request.headers.get('content-type') ?? '';
  if (!/^application\/json\s*(;|$)/i.test(type)) {
    throw new ApiFailure(
      415,
      'unsupported_media_type',
      'Actions take a JSON body (Content-Type: application/json).',
    );
  }
  if (request.headers.get(UI_HEADER) !== UI_HEADER_VALUE) {
    throw new ApiFailure(403, 'csrf', `Actions need the header ${UI_HEADER}: ${UI_HEADER_VALUE}.`);
  }
  const site = request.headers.get('sec-fetch-site');
  if (site !== null && site !== 'same-origin' && site !== 'none') {
    throw new ApiFailure(403, 'csrf', `A ${site} request cannot act on runs.`);
  }
  const origin = request.headers.get('origin');
  if (origin !== null && !sameOrigin(origin, request, trustedOrigins)) {
    throw new ApiFailure(403, 'csrf', `Requests from ${origin} cannot act on runs.`);
  }
}

function sameOrigin(origin: string, request: Request, trusted: ReadonlySet<string>): boolean {
  if (trusted.has(origin)) return true;
  let host: string;
  try {
    // `Origin: null` (a sandboxed frame, a file page) does not parse: refused.
    host = new URL(origin).host;
  } catch {
    return false;
  }
  const own = request.headers.get('host') ?? new URL(request.url).host;
  return host.toLowerCase() === own.toLowerCase();
}

/**
 * The Content-Security-Policy of every answer: only this origin's scripts (the page's config is a
 * JSON data block, not a script), styles of this origin or inline (the DAG sets positions with
 * style attributes), no framing, no plugins, fetches to this origin only.
 */
export const CONTENT_SECURITY_POLICY = {
  defaultSrc: ["'self'"],
  scriptSrc: ["'self'"],
  styleSrc: ["'self'", "'unsafe-inline'"],
  imgSrc: ["'self'", 'data:', 'blob:'],
  fontSrc: ["'self'", 'data:'],
  connectSrc: ["'self'"],
  workerSrc: ["'self'", 'blob:'],
  objectSrc: ["'none'"],
  baseUri: ["'self'"],
  frameAncestors: ["'none'"],
  formAction: ["'self'"],
};
