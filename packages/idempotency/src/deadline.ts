/**
 * A hard deadline on every HTTP request a provider SDK makes, connect included, for the adapters'
 * quiet periods to rest on: `deadlineAgent(protocol, deadlineMs)` is an `http.Agent` (or
 * `https.Agent`) to hand to the SDK (axios' `httpAgent`/`httpsAgent`, stripe-node's `httpAgent`).
 *
 * Why an agent: Node's `ClientRequest.setTimeout`, which axios' `timeout` and stripe-node's
 * timeout use, arms the socket's idle timer only once the socket has connected
 * (nodejs.org/api/http.html, `request.setTimeout`: "Once a socket is assigned to this request and
 * is connected"), so a connect whose SYN is dropped has no deadline: the kernel retries the SYN
 * (`net.ipv4.tcp_syn_retries`, about two minutes by default) and the request is sent whenever the
 * path heals. The agent sees the request when it is made (`addRequest`, before DNS, connect and
 * TLS) and every socket it creates.
 *
 * What the deadline does: `deadlineMs` after the request was made, unless its response has been
 * read whole, the request is destroyed with a `ProviderDeadlineError` and its TCP socket is reset
 * (SO_LINGER 0, an RST) rather than closed: Linux keeps retransmitting the unsent bytes of a
 * closed socket (an orphan) after close, so a request written during a partition could still reach
 * the provider after the deadline; a reset discards them. The same holds for any other destroy of
 * a connected socket (the SDK's own timeout, an abort). A socket still connecting is closed: no
 * byte of the request has been handed to the kernel, and closing a socket in SYN-SENT ends its
 * SYN retries (the provider's SYN-ACK, if any, is answered with a reset).
 *
 * So no byte of a request made through the agent leaves this host later than `deadlineMs` after
 * it was made, give or take a timer's lateness (the event loop's) and frames already handed to
 * the network: one queued by the kernel while it resolves a directly attached peer's address
 * (ARP, a few seconds of probes) goes out if the resolution succeeds, reset socket or not.
 * `deadlineQuietPeriodMs` adds a margin for these.
 *
 * Inside `once()`, a request is also bounded by the call's start as the ledger stamped it
 * (`withCallDeadline`): a worker cut off right after sending that stamp hears of its commit only
 * once the network heals, possibly after the quiet period; its request is then refused unsent
 * rather than made late, when another attempt may already have settled the key.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import * as http from 'node:http';
import * as https from 'node:https';
import * as net from 'node:net';
import type { Duplex } from 'node:stream';

/** `ProviderDeadlineError.code` when the socket had never connected: nothing was sent. */
export const DEADLINE_NOT_CONNECTED = 'CYCLONE_DEADLINE_NOT_CONNECTED';
/** `ProviderDeadlineError.code` when the socket had connected: the request may have been sent. */
export const DEADLINE_EXCEEDED = 'CYCLONE_DEADLINE_EXCEEDED';

/**
 * Margin of `deadlineQuietPeriodMs` over the deadline, ms: the deadline timer's lateness under a
 * busy event loop and the reset's way out, with room to spare (5,000 ms).
 */
export const DEADLINE_QUIET_MARGIN_MS = 5_000;

/**
 * The quiet period a ledger needs for calls whose every request runs under a `deadlineMs` agent:
 * the longest time after a call's start that one of its requests can reach the provider, for a
 * call that makes `requests` requests one after the other (1 + the SDK's retries) with at most
 * `retryDelaysMs` in total between them.
 */
export function deadlineQuietPeriodMs(deadlineMs: number, requests = 1, retryDelaysMs = 0): number {
  return deadlineMs * requests + retryDelaysMs + DEADLINE_QUIET_MARGIN_MS;
}

/**
 * A request's hard deadline passed. `code` is `DEADLINE_NOT_CONNECTED` when its socket had never
 * connected (no byte of the request can have left, and none can later: the socket was closed in
 * SYN-SENT; classified `not_sent`), `DEADLINE_EXCEEDED` otherwise (the socket was reset; the
 * request may have reached the provider before; `ambiguous`).
 */
export class ProviderDeadlineError extends Error {
  readonly code: typeof DEADLINE_NOT_CONNECTED | typeof DEADLINE_EXCEEDED;
  /** The deadline, ms after the request was made. */
  readonly deadlineMs: number;
  /** Whether the request's socket had connected. */
  readonly connected: boolean;

  /**
   * @param late true when the request was refused unsent because the call's time since the
   *   ledger's stamp had run out (`withCallDeadline`).
   */
  constructor(deadlineMs: number, connected: boolean, late = false) {
    super(
      connected
        ? `no complete response within the hard deadline of ${deadlineMs} ms; the connection was reset (the request may have been sent)`
        : late
          ? "the call's time since its start was stamped in the ledger ran out before the request could be sent; nothing was sent"
          : `not connected within the hard deadline of ${deadlineMs} ms; the connection attempt was abandoned (nothing was sent)`,
    );
    this.name = 'ProviderDeadlineError';
    this.code = connected ? DEADLINE_EXCEEDED : DEADLINE_NOT_CONNECTED;
    this.deadlineMs = deadlineMs;
    this.connected = connected;
  }
}

/** Options of `deadlineAgent`, besides the deadline. */
export interface DeadlineAgentOptions {
  /** Keep connections open between requests (Node's `keepAlive`). Default true. */
  keepAlive?: boolean;
  /** Node's `maxSockets`. Default Node's (Infinity). */
  maxSockets?: number;
  /** TLS options of an `https:` agent (`ca`, `rejectUnauthorized`, …), passed to `https.Agent`. */
  tls?: https.AgentOptions;
}

/** The TCP socket under each socket the agent hands out, and whether it ever connected. */
interface Tcp {
  raw: net.Socket;
  connected: boolean;
  /** `performance.now()` by which the request on it must be under way (see `armDeadline`). */
  deadlineAt?: number;
  deadlineMs?: number;
}

/** The absolute deadline (`performance.now()` ms) of the `once()` call a request is made for. */
const callDeadline = new AsyncLocalStorage<number>();

/**
 * The instant (`performance.now()` ms) by which the requests of a call whose start the ledger
 * stamped no earlier than `stampedAt` must be under way, so that none reaches the provider after
 * `quietPeriodMs` from that stamp: the quiet period less `DEADLINE_QUIET_MARGIN_MS` (at least
 * half of it). Undefined for a quiet period of 0 (the provider dedupes by key; nothing to bound).
 */
export function callDeadlineAt(stampedAt: number, quietPeriodMs: number): number | undefined {
  if (!(quietPeriodMs > 0)) return undefined;
  return stampedAt + Math.max(quietPeriodMs - DEADLINE_QUIET_MARGIN_MS, quietPeriodMs / 2);
}

/**
 * Runs `fn` with `at` (`performance.now()` ms; undefined: none) as the deadline of every request
 * a `deadlineAgent` sees from it: each request's own deadline is cut to what is left, and one
 * made after `at` is refused unsent (`DEADLINE_NOT_CONNECTED`). `once()` sets it for its call.
 */
export function withCallDeadline<T>(at: number | undefined, fn: () => T): T {
  return at === undefined ? fn() : callDeadline.run(at, fn);
}

const TCP = Symbol('cyclone.deadline.tcp');
type Tracked = Duplex & { [TCP]?: Tcp };

/**
 * An agent for `protocol` whose every request has a hard deadline of `deadlineMs` over the whole
 * request (DNS, connect, TLS, sending, the response read whole), after which its socket is reset;
 * see the module comment. Hand it to the SDK as its HTTP agent; it must match the base URL's
 * protocol (Node refuses an `https:` agent for an `http:` URL).
 * @param deadlineMs a positive integer, ms.
 * @throws RangeError when `deadlineMs` is not a positive integer.
 */
export function deadlineAgent(
  protocol: 'http:' | 'https:',
  deadlineMs: number,
  options: DeadlineAgentOptions = {},
): http.Agent {
  if (!Number.isInteger(deadlineMs) || deadlineMs <= 0) {
    throw new RangeError(`deadlineMs must be a positive integer (ms), got ${deadlineMs}`);
  }
  const base: http.AgentOptions = { keepAlive: options.keepAlive ?? true };
  if (options.maxSockets !== undefined) base.maxSockets = options.maxSockets;
  const agent =
    protocol === 'https:'
      ? new https.Agent({ ...options.tls, ...base })
      : new http.Agent({ ...base });
  const create = agent.createConnection.bind(agent) as (
    o: Record<string, unknown>,
    cb?: (err: Error | null, s?: Duplex) => void,
  ) => Duplex;
  // The agent's own connection maker, given a TCP socket of ours (`socket` is what tls.connect
  // wraps), so that the TCP socket is at hand to reset.
  (agent as unknown as { createConnection: typeof create }).createConnection = (o, cb) => {
    const raw = net.connect(tcpOptions(o));
    const tcp: Tcp = { raw, connected: false };
    raw.once('connect', () => {
      // Runs before http writes the request: a process stalled until after the deadline (its
      // timer not run yet) must not send it now.
      if (tcp.deadlineAt !== undefined && performance.now() >= tcp.deadlineAt) {
        raw.destroy(new ProviderDeadlineError(tcp.deadlineMs ?? 0, false));
        return;
      }
      tcp.connected = true;
    });
    const sock: Tracked = protocol === 'https:' ? create({ ...o, socket: raw }, cb) : raw;
    sock[TCP] = tcp;
    resetOnDestroy(tcp);
    return sock;
  };
  const addRequest = (
    agent as unknown as { addRequest: (req: http.ClientRequest, o: unknown) => void }
  ).addRequest.bind(agent);
  (agent as unknown as { addRequest: typeof addRequest }).addRequest = (req, o) => {
    armDeadline(req, deadlineMs);
    // Also for a request destroyed unsent: handing it a socket is how Node reports its error
    // (onSocket sees it destroyed and writes nothing).
    addRequest(req, o);
  };
  return agent;
}

/** The connect options of the TCP socket: the agent's, without `path` (an IPC path to `net`). */
function tcpOptions(o: Record<string, unknown>): net.NetConnectOpts {
  const { path: _path, socket: _socket, ...rest } = o;
  return rest as unknown as net.NetConnectOpts;
}

/**
 * Makes every destroy of the TCP socket reset it when it has connected (an unsent request would
 * otherwise be retransmitted after close); a TLS socket destroys its TCP socket with it. Node's
 * `resetAndDestroy` takes no error, so the reset is asked for the way it asks for it
 * (`resetAndClosing`, Node ≥ 18.3) and the destroy keeps its error for the request.
 */
function resetOnDestroy(tcp: Tcp): void {
  const raw = tcp.raw as net.Socket & { resetAndClosing?: boolean; _handle?: unknown };
  const destroy = raw.destroy;
  raw.destroy = function (this: net.Socket, err?: Error) {
    if (tcp.connected && !raw.destroyed && raw._handle) raw.resetAndClosing = true;
    return destroy.call(this, err);
  } as typeof raw.destroy;
}

/**
 * Destroys `req` `deadlineMs` from now (or at its call's deadline, if sooner) unless it has
 * closed (its response read, or failed); at once, unsent, when the call's deadline has passed.
 */
function armDeadline(req: http.ClientRequest, deadlineMs: number): void {
  const now = performance.now();
  const call = callDeadline.getStore();
  const at = call === undefined ? now + deadlineMs : Math.min(now + deadlineMs, call);
  if (at <= now) {
    req.destroy(new ProviderDeadlineError(deadlineMs, false, true));
    return;
  }
  req.once('socket', (s: Tracked) => {
    const tcp = s[TCP];
    if (tcp && !tcp.connected) {
      tcp.deadlineAt = at;
      tcp.deadlineMs = deadlineMs;
    }
  });
  const timer = setTimeout(() => {
    if (req.destroyed && req.socket === null) return;
    const tcp = (req.socket as Tracked | null)?.[TCP];
    req.destroy(new ProviderDeadlineError(deadlineMs, tcp?.connected ?? false));
  }, at - now);
  req.once('close', () => clearTimeout(timer));
}
