/**
 * A provider cut off by a network partition, for the adapters' hard-deadline tests: a
 * recording HTTP server (recording-server.ts) in a host of its own (netns.ts), reached from the
 * test process over the bridge, and three scenarios that return what happened (the test
 * asserts):
 * - `blackholedConnect`: cut before the call, so its SYN is dropped;
 * - `writtenIntoBlackhole`: a first call leaves a pooled connection, then the cut, then a second
 *   call writes its request into the blackhole (it sits in the kernel's send buffer);
 * - `responseBlackholed`: the request arrives, then the cut drops the answer.
 * Each heals the partition after the call settled (or gave up waiting) and watches the server
 * for `afterHealMs` more, to count requests that arrived late.
 *
 * Needs what netns.ts needs (`netnsSupport()` says why not).
 */
import { execFile } from 'node:child_process';
import { connect } from 'node:net';
import { promisify } from 'node:util';
import { type ChildWorker, spawnWorker } from './child.js';
import { HostNetwork, type NetHost } from './netns.js';

const run = promisify(execFile);
const IP = '/usr/sbin/ip';

/** One request the server received whole. */
export interface ReceivedRequest {
  /** When it was read whole, epoch ms (the server's clock, the same machine's). */
  at: number;
  method: string;
  path: string;
  bytes: number;
}

/** What a scenario saw. */
export interface PartitionOutcome {
  /** ms from the call's start to its settling, or undefined if it had not within the wait. */
  settledAfterMs: number | undefined;
  /** The call's rejection (undefined if it resolved or had not settled). */
  error: unknown;
  /** True if the call resolved. */
  resolved: boolean;
  /** When the call started, epoch ms. */
  startedAt: number;
  /** When the partition was healed, epoch ms. */
  healedAt: number;
  /** Requests the server received from the call's start to the end of the watch after the heal. */
  received: ReceivedRequest[];
}

/** Timing of a scenario, ms. */
export interface ScenarioTiming {
  /** How long to wait for the call to settle while cut off. */
  waitMs: number;
  /** When to heal, ms after the call's start (not before the call settled or `waitMs`). */
  healAfterMs: number;
  /** How long to watch the server after the heal. */
  afterHealMs: number;
}

/** The recording server in a host of its own, its partition, and the scenarios (module comment). */
export class ProviderPartition {
  private constructor(
    readonly net: HostNetwork,
    readonly host: NetHost,
    private readonly server: ChildWorker,
    /** The server's port. */
    readonly port: number,
  ) {}

  /** Starts the network (one host) and the server in it. Check `netnsSupport()` first. */
  static async start(): Promise<ProviderPartition> {
    const net = await HostNetwork.create({ hosts: 1 });
    const host = net.hosts[0] as NetHost;
    try {
      const server = await spawnWorker({
        script: new URL('./recording-server.ts', import.meta.url),
        wrap: net.wrap(host),
        label: 'provider',
        ready: /^READY (\d+) (\d+)$/,
        env: { LISTEN_HOST: host.address },
      });
      await pinNeighbours(net, host);
      return new ProviderPartition(net, host, server, Number(server.workerId));
    } catch (err) {
      await net.close();
      throw err;
    }
  }

  /** `http://<host address>:<port>`. */
  get origin(): string {
    return `http://${this.host.address}:${this.port}`;
  }

  /** Every request received so far. */
  requests(): ReceivedRequest[] {
    return this.server.lines
      .filter((l) => l.startsWith('REQ '))
      .map((l) => {
        const [, at, method, path, bytes] = l.split(' ');
        return { at: Number(at), method: String(method), path: String(path), bytes: Number(bytes) };
      });
  }

  /** Delays the server's answers by `ms` from now on. */
  async delay(ms: number): Promise<void> {
    const acks = () => this.server.lines.filter((l) => l === `DELAYED ${ms}`).length;
    const before = acks();
    this.server.proc.stdin.write(`DELAY ${ms}\n`);
    const until = Date.now() + 5_000;
    while (acks() === before) {
      if (Date.now() > until) throw new Error(`the server did not take DELAY ${ms}`);
      await sleep(5);
    }
  }

  /**
   * The call is made while the provider is cut off: its connect is blackholed (its SYN dropped
   * on the bridge). A connection opened and closed first checks the path.
   */
  async blackholedConnect(
    call: () => Promise<unknown>,
    timing: ScenarioTiming,
  ): Promise<PartitionOutcome> {
    await new Promise<void>((resolve, reject) => {
      const s = connect({ host: this.host.address, port: this.port }, () => {
        s.destroy();
        resolve();
      });
      s.on('error', reject);
    });
    await this.net.cut(this.host);
    return this.watch(call, timing, async () => {});
  }

  /**
   * `warm` (a call that succeeds) leaves a pooled connection; after the cut, `call` reuses it
   * and writes its request into the blackhole.
   */
  async writtenIntoBlackhole(
    warm: () => Promise<unknown>,
    call: () => Promise<unknown>,
    timing: ScenarioTiming,
  ): Promise<PartitionOutcome> {
    await warm();
    await this.net.cut(this.host);
    return this.watch(call, timing, async () => {});
  }

  /** The request arrives (the server delays its answer), then the cut drops the answer. */
  async responseBlackholed(
    call: () => Promise<unknown>,
    timing: ScenarioTiming,
  ): Promise<PartitionOutcome> {
    await this.delay(1_000);
    const before = this.requests().length;
    return this.watch(call, timing, async () => {
      while (this.requests().length === before) await sleep(5);
      await this.net.cut(this.host);
    });
  }

  private async watch(
    call: () => Promise<unknown>,
    timing: ScenarioTiming,
    whileRunning: () => Promise<void>,
  ): Promise<PartitionOutcome> {
    const start = Date.now();
    const out: PartitionOutcome = {
      settledAfterMs: undefined,
      error: undefined,
      resolved: false,
      startedAt: start,
      healedAt: 0,
      received: [],
    };
    const settled = call().then(
      () => {
        out.settledAfterMs = Date.now() - start;
        out.resolved = true;
      },
      (err: unknown) => {
        out.settledAfterMs = Date.now() - start;
        out.error = err;
      },
    );
    await whileRunning();
    await Promise.race([settled, sleep(timing.waitMs - (Date.now() - start))]);
    const settledInTime = out.settledAfterMs;
    await sleep(timing.healAfterMs - (Date.now() - start));
    await this.net.heal(this.host);
    out.healedAt = Date.now();
    await sleep(timing.afterHealMs);
    await this.delay(0);
    out.settledAfterMs = settledInTime;
    out.received = this.requests().filter((r) => r.at >= start);
    return out;
  }

  /** Stops the server and removes the network. */
  async close(): Promise<void> {
    await this.server.kill();
    await this.net.close();
  }
}

/**
 * Permanent neighbour (ARP) entries both ways between the root namespace and `host`, so that a cut
 * drops frames as a partition behind a router would: without them the kernel queues frames while
 * it re-resolves the silent peer's address and sends them if that succeeds after the heal (a
 * reset socket's included), and when it gives up it fails connects with `EHOSTUNREACH` and kills
 * closed sockets still retransmitting (a soft error), none of which a routed path does.
 */
async function pinNeighbours(net: HostNetwork, host: NetHost): Promise<void> {
  const inner = `cyn${net.tag}${host.index}`;
  const mac = async (args: string[]) => {
    const { stdout } = await run(IP, args);
    const m = /link\/ether ([0-9a-f:]{17})/.exec(stdout);
    if (!m?.[1]) throw new Error(`no MAC address in: ip ${args.join(' ')}`);
    return m[1];
  };
  const hostMac = await mac(['-n', host.ns, '-o', 'link', 'show', inner]);
  const bridgeMac = await mac(['-o', 'link', 'show', net.bridge]);
  await run(IP, [
    'neigh',
    'replace',
    host.address,
    'lladdr',
    hostMac,
    'dev',
    net.bridge,
    'nud',
    'permanent',
  ]);
  await run(IP, [
    '-n',
    host.ns,
    'neigh',
    'replace',
    net.serverAddress,
    'lladdr',
    bridgeMac,
    'dev',
    inner,
    'nud',
    'permanent',
  ]);
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, Math.max(0, ms)));
}
