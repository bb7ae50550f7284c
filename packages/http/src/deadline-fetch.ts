/**
 * The transport of `idempotentFetch`'s guarded requests when no `fetch` is given: a small
 * fetch-shaped client over `node:http`/`node:https` with `@cyclone/idempotency`'s
 * `deadlineAgent`, so that each request has a hard deadline from its start (DNS, connect, TLS,
 * sending, the body read whole), after which its socket is reset. The platform's `fetch`
 * (undici) aborts by destroying the socket, and Linux keeps retransmitting the unsent bytes of a
 * closed socket, so a request written during a partition could still reach the API after the
 * abort; a reset discards them. Hence the quiet period rests on the deadline: no byte of a guarded
 * request reaches the API later than `timeoutMs` after the call started.
 *
 * It differs from `fetch` where the guard does not need more: a redirect is not followed (the
 * 3xx is the answer, as with `redirect: 'manual'` but readable), no `accept-encoding` is added
 * (a compressed body the caller asked for is decoded: gzip, deflate, br), and the body must be
 * bytes or a string (what `idempotentFetch` sends).
 */
import * as http from 'node:http';
import * as https from 'node:https';
import { brotliDecompressSync, gunzipSync, inflateSync } from 'node:zlib';
import { deadlineAgent } from '@cyclone/idempotency';

/** Statuses whose `Response` must have a null body (the Fetch standard's "null body status"). */
const NULL_BODY = new Set([101, 103, 204, 205, 304]);

/**
 * A `fetch` whose every request has a hard deadline of `deadlineMs` (see the module comment).
 * Honours `init.method`, `init.headers`, `init.body` (a string, `Uint8Array` or `ArrayBuffer`)
 * and `init.signal` (an abort resets the socket too); other `RequestInit` fields are ignored.
 * Rejects with `ProviderDeadlineError` (`code` `CYCLONE_DEADLINE_NOT_CONNECTED` when the socket
 * never connected, else `CYCLONE_DEADLINE_EXCEEDED`), with the signal's reason's `AbortError`, or
 * with the socket's error; a `TypeError` for a URL that is not http(s) or an unsupported body.
 * @param deadlineMs a positive integer, ms.
 */
export function deadlineFetch(deadlineMs: number): typeof fetch {
  // One per deadline, so connections are reused across handler attempts.
  let f = byDeadline.get(deadlineMs);
  if (!f) {
    f = makeDeadlineFetch(deadlineMs);
    byDeadline.set(deadlineMs, f);
  }
  return f;
}

const byDeadline = new Map<number, typeof fetch>();

function makeDeadlineFetch(deadlineMs: number): typeof fetch {
  const agents = {
    'http:': deadlineAgent('http:', deadlineMs),
    'https:': deadlineAgent('https:', deadlineMs),
  };
  return async (input: string | URL | Request, init: RequestInit = {}): Promise<Response> => {
    const url = new URL(input instanceof Request ? input.url : String(input));
    if (url.protocol !== 'http:' && url.protocol !== 'https:') {
      throw new TypeError(`deadlineFetch supports http: and https: URLs, not ${url.protocol}`);
    }
    const body = bodyBytes(init.body);
    const headers: Record<string, string> = {};
    new Headers(init.headers).forEach((v, k) => {
      headers[k] = v;
    });
    if (body !== undefined && headers['content-length'] === undefined) {
      headers['content-length'] = String(body.byteLength);
    }
    const mod = url.protocol === 'https:' ? https : http;
    return new Promise<Response>((resolve, reject) => {
      const req = mod.request(
        url,
        {
          method: init.method ?? 'GET',
          headers,
          agent: agents[url.protocol as 'http:' | 'https:'],
          signal: init.signal ?? undefined,
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('error', reject);
          res.on('end', () => {
            try {
              resolve(toResponse(res, Buffer.concat(chunks), url.href));
            } catch (err) {
              reject(err);
            }
          });
        },
      );
      req.on('error', reject);
      req.end(body);
    });
  };
}

function bodyBytes(b: RequestInit['body']): Uint8Array | undefined {
  if (b === undefined || b === null) return undefined;
  if (typeof b === 'string') return Buffer.from(b);
  if (b instanceof Uint8Array) return b;
  if (b instanceof ArrayBuffer) return new Uint8Array(b);
  throw new TypeError('deadlineFetch sends a string, Uint8Array or ArrayBuffer body only');
}

function decode(bytes: Buffer, encoding: string | undefined): Buffer {
  switch ((encoding ?? '').trim().toLowerCase()) {
    case 'gzip':
    case 'x-gzip':
      return gunzipSync(bytes);
    case 'deflate':
      return inflateSync(bytes);
    case 'br':
      return brotliDecompressSync(bytes);
    default:
      return bytes;
  }
}

function toResponse(res: http.IncomingMessage, bytes: Buffer, url: string): Response {
  const headers = new Headers();
  for (let i = 0; i + 1 < res.rawHeaders.length; i += 2) {
    headers.append(res.rawHeaders[i] as string, res.rawHeaders[i + 1] as string);
  }
  const status = res.statusCode ?? 0;
  const body = NULL_BODY.has(status) ? null : decode(bytes, headers.get('content-encoding') ?? '');
  const response = new Response(body, {
    status,
    statusText: res.statusMessage ?? '',
    headers,
  });
  Object.defineProperty(response, 'url', { value: url, enumerable: true, configurable: true });
  return response;
}
