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
 * when present, of this scheme and host or one of `trustedOrigins` (else 403 `csrf`). The host
 * compared is the request's own `Host` and the scheme the request's own (a reverse proxy must
 * pass the Host through, and one that ends TLS makes the scheme http: `trustedOrigins` names
 * the public origin then).
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
  let parsed: URL;
  try {
    // `Origin: null` (a sandboxed frame, a file page) does not parse: refused.
    parsed = new URL(origin);
  } catch {
    return false;
  }
  // An origin is scheme, host and port: https://h:1 is another origin than http://h:1.
  const url = new URL(request.url);
  if (parsed.protocol !== url.protocol) return false;
  const own = request.headers.get('host') ?? url.host;
  return parsed.host.toLowerCase() === own.toLowerCase();
}

/** The host names a UI without an `authorize` hook answers to by default: loopback only. */
export const LOOPBACK_HOSTS: readonly string[] = Object.freeze(['localhost', '127.0.0.1', '[::1]']);

/**
 * A matcher of the request's `Host` header against `allowed` (host names, optionally with
 * `:port`; a name without a port matches every port; case-insensitive). Refusing other hosts
 * stops DNS rebinding: a page of another site whose name was made to resolve to this server
 * sends its own name as `Host` (and as `Origin`), which no entry names.
 * @throws TypeError for an entry that is empty, has a scheme or path, or a bad port.
 */
export function hostMatcher(allowed: readonly string[]): (request: Request) => boolean {
  const entries = allowed.map((entry) => {
    const parsed = splitHost(entry.trim());
    if (!parsed || parsed.name === '') {
      throw new TypeError(`allowedHosts: '${entry}' is not a host name with an optional :port`);
    }
    return parsed;
  });
  return (request) => {
    const header = request.headers.get('host') ?? new URL(request.url).host;
    const given = splitHost(header.trim());
    if (!given) return false;
    return entries.some((e) => e.name === given.name && (e.port === null || e.port === given.port));
  };
}

/** `name[:port]` or `[v6][:port]`, lower-cased; null when it is not one. */
function splitHost(value: string): { name: string; port: string | null } | null {
  const match = /^(\[[0-9a-f:.]+\]|[^\s/:@[\]]*)(?::(\d{1,5}))?$/i.exec(value);
  if (!match) return null;
  const port = match[2] ?? null;
  if (port !== null && Number(port) > 65535) return null;
  return { name: (match[1] ?? '').toLowerCase().replace(/\.$/, ''), port };
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
