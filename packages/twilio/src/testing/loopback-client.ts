/**
 * Pointing the real `twilio` client at a local fake: a `RequestClient` subclass that rewrites every
 * request URI's origin (`https://api.twilio.com`, `next_page_uri` links included) to the fake's
 * `http://127.0.0.1:PORT`. Nothing else changes: auth, form encoding, timeouts and error mapping
 * stay the SDK's own.
 */
import twilio from 'twilio';
import type RequestClient from 'twilio/lib/base/RequestClient.js';
import type * as HttpResponse from 'twilio/lib/http/response.js';

/** Options of `LoopbackRequestClient`: the SDK's own (`timeout` in ms, `autoRetry`, …). */
export type LoopbackRequestClientOptions = ConstructorParameters<typeof twilio.RequestClient>[0];

/** A `twilio.RequestClient` that sends everything to `origin` (e.g. `http://127.0.0.1:40123`). */
export class LoopbackRequestClient extends twilio.RequestClient {
  /** The origin requests are rewritten to. */
  readonly origin: string;

  constructor(origin: string, options?: LoopbackRequestClientOptions) {
    super(options);
    this.origin = new URL(origin).origin;
  }

  /** The SDK's request, with `opts.uri` rewritten to `origin` (path and query kept). */
  override request<TData>(
    opts: RequestClient.RequestOptions<TData>,
  ): Promise<HttpResponse.default<TData>> {
    const u = new URL(opts.uri);
    return super.request<TData>({ ...opts, uri: `${this.origin}${u.pathname}${u.search}` });
  }
}
