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
 */
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

  constructor(deadlineMs: number, connected: boolean) {
    super(
      connected
        ? `no complete response within the hard deadline of ${deadlineMs} ms; the connection was reset (the request may have been sent)`
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

/** Destroys `req` `deadlineMs` from now unless it has closed (its response read, or failed). */
function armDeadline(req: http.ClientRequest, deadlineMs: number): void {
  const timer = setTimeout(() => {
    if (req.destroyed && req.socket === null) return;
    const tcp = (req.socket as Tracked | null)?.[TCP];
    req.destroy(new ProviderDeadlineError(deadlineMs, tcp?.connected ?? false));
  }, deadlineMs);
  req.once('close', () => clearTimeout(timer));
}
