/**
 * Who may use the UI and what they may do: the `authorize` hook's types and the helpers that
 * build one (`basicAuth`, `bearerToken`, `anyOf`). The server calls the hook on every request but
 * the health checks and robots.txt, and re-checks the rights on every mutation, whatever the
 * page shows.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { Permissions } from './shared/api.js';

/** A user the hook let in. `can` omitted: every right; given: only the rights set to true. */
export interface Authorized {
  user: string;
  can?: Partial<Permissions>;
}

/**
 * A refusal: 401 (not authenticated; `challenge` becomes the `WWW-Authenticate` header, so a
 * browser asks for credentials) or 403 (authenticated, not allowed).
 */
export interface Refused {
  refuse: 401 | 403;
  challenge?: string;
  message?: string;
}

/** What the hook answers; `null`, `undefined` and `false` refuse with 401. */
export type AuthorizeResult = Authorized | Refused | null | undefined | false;

/**
 * The `authorize` option: called with the request (a web-standard `Request`, whichever server
 * the UI is mounted in). May be async; a throw answers 500.
 */
export type AuthorizeHook = (request: Request) => AuthorizeResult | Promise<AuthorizeResult>;

/** Every right. */
export const ALL_RIGHTS: Readonly<Permissions> = Object.freeze({
  retry: true,
  cancel: true,
  signal: true,
  schedules: true,
});

/** No right (read-only). */
export const NO_RIGHTS: Readonly<Permissions> = Object.freeze({
  retry: false,
  cancel: false,
  signal: false,
  schedules: false,
});

/** The rights an `Authorized` answer grants: all when `can` is omitted, else those set true. */
export function rightsOf(granted: Authorized): Permissions {
  if (!granted.can) return { ...ALL_RIGHTS };
  return {
    retry: granted.can.retry === true,
    cancel: granted.can.cancel === true,
    signal: granted.can.signal === true,
    schedules: granted.can.schedules === true,
  };
}

/** Options of `basicAuth` and `bearerToken`. */
export interface CredentialOptions {
  /** The realm named in the `WWW-Authenticate` challenge. Default `Cyclone`. */
  realm?: string;
  /** The rights granted. Default all. */
  can?: Partial<Permissions>;
}

/**
 * Constant-time equality of two strings: compares their SHA-256 digests, so neither the length
 * nor the first differing byte shows in the time taken.
 */
function sameSecret(given: string, expected: string): boolean {
  const a = createHash('sha256').update(given, 'utf8').digest();
  const b = createHash('sha256').update(expected, 'utf8').digest();
  return timingSafeEqual(a, b);
}

function quoted(realm: string): string {
  return `"${realm.replace(/["\\]/g, '')}"`;
}

/**
 * An `authorize` hook for HTTP Basic authentication (RFC 7617) with one user: the request's
 * `Authorization: Basic …` must carry `user` and `password` (compared in constant time); else 401
 * with `WWW-Authenticate: Basic realm="Cyclone", charset="UTF-8"`, so a browser asks for them.
 * Use it over HTTPS or on loopback only: Basic credentials are not encrypted.
 * @throws TypeError when `user` or `password` is empty, or `user` contains a colon.
 */
export function basicAuth(
  user: string,
  password: string,
  options: CredentialOptions = {},
): AuthorizeHook {
  if (!user || !password) throw new TypeError('basicAuth needs a non-empty user and password');
  if (user.includes(':')) throw new TypeError('basicAuth: a user name cannot contain a colon');
  const challenge = `Basic realm=${quoted(options.realm ?? 'Cyclone')}, charset="UTF-8"`;
  return (request) => {
    const header = request.headers.get('authorization') ?? '';
    const match = /^Basic[ ]+([A-Za-z0-9+/=._~-]+)\s*$/i.exec(header);
    if (match?.[1]) {
      const decoded = Buffer.from(match[1], 'base64').toString('utf8');
      const colon = decoded.indexOf(':');
      if (colon >= 0) {
        // Both compared every time, so a right user name does not answer faster.
        const userOk = sameSecret(decoded.slice(0, colon), user);
        const passwordOk = sameSecret(decoded.slice(colon + 1), password);
        if (userOk && passwordOk) return { user, ...(options.can ? { can: options.can } : {}) };
      }
    }
    return { refuse: 401, challenge, message: 'Basic credentials are missing or wrong.' };
  };
}

/** Options of `bearerToken`. */
export interface BearerOptions extends CredentialOptions {
  /** The user name the token stands for, in the audit log and the page. Default `token`. */
  user?: string;
}

/**
 * An `authorize` hook for a shared bearer token (RFC 6750): `Authorization: Bearer <token>`,
 * compared in constant time; else 401 with `WWW-Authenticate: Bearer realm="Cyclone"`. Meant for
 * a reverse proxy or script that adds the header; a browser cannot send it on its own. The header
 * may have spaces around the token (they are not part of it); the token itself has none.
 * @throws TypeError when `token` is empty or contains whitespace (no header could carry it, so
 *   nobody could ever be let in: trim a token read from a file or variable first).
 */
export function bearerToken(token: string, options: BearerOptions = {}): AuthorizeHook {
  if (!token) throw new TypeError('bearerToken needs a non-empty token');
  if (/\s/.test(token)) {
    throw new TypeError('bearerToken: a token cannot contain whitespace (trim it first)');
  }
  const challenge = `Bearer realm=${quoted(options.realm ?? 'Cyclone')}`;
  const user = options.user ?? 'token';
  return (request) => {
    const header = request.headers.get('authorization') ?? '';
    const match = /^\s*Bearer[ ]+(\S+)\s*$/i.exec(header);
    if (match?.[1] && sameSecret(match[1], token)) {
      return { user, ...(options.can ? { can: options.can } : {}) };
    }
    return { refuse: 401, challenge, message: 'The bearer token is missing or wrong.' };
  };
}

/**
 * An `authorize` hook that asks each of `hooks` in turn and lets in with the first that does;
 * when none does, answers the first refusal (with its challenge), or 401.
 */
export function anyOf(...hooks: AuthorizeHook[]): AuthorizeHook {
  return async (request) => {
    let first: AuthorizeResult;
    for (const hook of hooks) {
      const answer = await hook(request);
      if (isAuthorized(answer)) return answer;
      first ??= answer || undefined;
    }
    return first ?? null;
  };
}

/** True when the hook's answer lets the user in. */
export function isAuthorized(answer: AuthorizeResult): answer is Authorized {
  return (
    typeof answer === 'object' &&
    answer !== null &&
    typeof (answer as Authorized).user === 'string' &&
    !('refuse' in answer)
  );
}
