/**
 * Hosts of a test's own, each a Linux network namespace, and network partitions between them and
 * the root namespace, where the test runs its PostgreSQL (pg-server.ts) and its fakes.
 *
 * Layout: one bridge in the root namespace carries the server address `10.213.S.1/24`; each host
 * is a namespace `cyclone-<tag>-h<i>` joined to the bridge by a veth pair, its end inside the
 * namespace addressed `10.213.S.<10 + i>/24`. `S` is a /24 of 10.213.0.0/16 that no interface on
 * this machine uses yet, so tests running at the same time keep apart.
 *
 * A cut (`cut(i)`) disables the host's port on the bridge (`bridge link set … state disabled`):
 * every frame in either direction is dropped there, silently. Both ends of the veth keep their
 * carrier, so the host's kernel sends as usual and nothing is refused or reset: TCP sees a peer
 * that went silent, as in a real partition (a link set down instead would make the host's own
 * stack drop its packets, which TCP treats as local congestion, not as loss on the path).
 * `heal(i)` sets the port forwarding again.
 *
 * Needs root, `ip`, `bridge` and `ss` (iproute2) and network namespaces: `netnsSupport()` says why not,
 * for the test to report itself skipped. Everything created is removed by `close()`, by a process
 * `exit` hook when a test dies without it, and, for a process killed outright, by the next
 * `HostNetwork.create` (names carry the creating pid; those of dead pids are removed).
 */
import { execFile, execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { promisify } from 'node:util';
import { ExitTracked } from './exit-hooks.js';

const run = promisify(execFile);

/** One host: its namespace, its address and the root side of its veth pair. */
export interface NetHost {
  /** 0, 1, … in creation order. */
  readonly index: number;
  /** The network namespace (`ip netns exec <ns> …` runs a process inside). */
  readonly ns: string;
  /** The host's IPv4 address. */
  readonly address: string;
  /** The root namespace's end of the veth pair (a port of the bridge). */
  readonly rootIf: string;
  /** True while cut off. */
  cut: boolean;
}

const IP = '/usr/sbin/ip';
const BRIDGE = '/usr/sbin/bridge';
/** The /16 the hosts' subnets come from; RFC 1918 space no default route or Docker network uses. */
const PREFIX = '10.213';

/**
 * Why hosts cannot be made here (not Linux, not root, no iproute2, no network namespaces), or
 * undefined when they can. Probes by creating and deleting one namespace.
 */
export function netnsSupport(): string | undefined {
  if (process.platform !== 'linux')
    return `network namespaces need Linux (this is ${process.platform})`;
  if (process.getuid?.() !== 0)
    return 'network namespaces need root (run the test as root, as CI does)';
  for (const bin of [IP, BRIDGE]) {
    if (!existsSync(bin)) return `${bin} is missing (install iproute2)`;
  }
  if (!['/usr/bin/ss', '/bin/ss', '/usr/sbin/ss'].some((p) => existsSync(p))) {
    return 'ss is missing (install iproute2)';
  }
  const probe = `cyclone-probe-${process.pid}`;
  try {
    execFileSync(IP, ['netns', 'add', probe], { stdio: 'pipe' });
    execFileSync(IP, ['netns', 'del', probe], { stdio: 'pipe' });
  } catch (err) {
    const stderr = (err as { stderr?: Buffer }).stderr?.toString().trim();
    return `cannot create a network namespace: ${stderr || String(err)}`;
  }
  return undefined;
}

let seq = 0;
const open = new ExitTracked<HostNetwork>((n) => n.closeSync());

/** A bridge, its hosts and their partitions; see the module comment. */
export class HostNetwork {
  readonly hosts: NetHost[] = [];
  private closed = false;

  private constructor(
    /** Unique per network: the creating pid and a sequence number, in base 36. */
    readonly tag: string,
    /** The third octet of the /24. */
    readonly subnet: number,
    /** The bridge in the root namespace. */
    readonly bridge: string,
  ) {}

  /** The root namespace's address on the bridge: where hosts reach the server and the fakes. */
  get serverAddress(): string {
    return `${PREFIX}.${this.subnet}.1`;
  }

  /** The subnet in CIDR form (for pg_hba.conf). */
  get cidr(): string {
    return `${PREFIX}.${this.subnet}.0/24`;
  }

  /**
   * Makes the bridge and `hosts` hosts.
   * @throws when a command fails (what was made is removed first); check `netnsSupport()` before.
   */
  static async create(options: { hosts: number }): Promise<HostNetwork> {
    removeStale();
    // Six characters: the pid (five, base 36) and a sequence number (one).
    const tag = `${process.pid.toString(36).padStart(5, '0')}${(seq++ % 36).toString(36)}`;
    const net = new HostNetwork(tag, freeSubnet(), `cyb${tag}`);
    open.add(net);
    try {
      await ip('link', 'add', net.bridge, 'type', 'bridge');
      await ip('addr', 'add', `${net.serverAddress}/24`, 'dev', net.bridge);
      await ip('link', 'set', net.bridge, 'up');
      for (let i = 0; i < options.hosts; i++) await net.addHost();
      return net;
    } catch (err) {
      net.closeSync();
      throw err;
    }
  }

  /** Adds one host (namespace, veth pair on the bridge, address, loopback up). */
  async addHost(): Promise<NetHost> {
    const index = this.hosts.length;
    const host: NetHost = {
      index,
      ns: `cyclone-${this.tag}-h${index}`,
      address: `${PREFIX}.${this.subnet}.${10 + index}`,
      rootIf: `cyh${this.tag}${index}`,
      cut: false,
    };
    const inner = `cyn${this.tag}${index}`;
    this.hosts.push(host);
    await ip('netns', 'add', host.ns);
    await ip('link', 'add', host.rootIf, 'type', 'veth', 'peer', 'name', inner);
    await ip('link', 'set', inner, 'netns', host.ns);
    await ip('link', 'set', host.rootIf, 'master', this.bridge);
    await ip('link', 'set', host.rootIf, 'up');
    await ip('-n', host.ns, 'addr', 'add', `${host.address}/24`, 'dev', inner);
    await ip('-n', host.ns, 'link', 'set', inner, 'up');
    await ip('-n', host.ns, 'link', 'set', 'lo', 'up');
    return host;
  }

  /** The command prefix that runs a program inside `host`'s namespace. */
  wrap(host: NetHost): string[] {
    return [IP, 'netns', 'exec', host.ns];
  }

  /** Cuts `host` off: its frames are dropped on the bridge from now on, both ways. */
  async cut(host: NetHost): Promise<void> {
    await run(BRIDGE, ['link', 'set', 'dev', host.rootIf, 'state', '0']);
    host.cut = true;
  }

  /** Ends `host`'s partition: its bridge port forwards again. */
  async heal(host: NetHost): Promise<void> {
    await run(BRIDGE, ['link', 'set', 'dev', host.rootIf, 'state', '3']);
    host.cut = false;
  }

  /**
   * The TCP connections established from inside `host` to `address`:`port`, as their local
   * `address:port` (read with `ss` in the namespace; the kernel's view, whatever the processes
   * think).
   */
  async established(host: NetHost, address: string, port: number): Promise<string[]> {
    const { stdout } = await run(IP, [
      'netns',
      'exec',
      host.ns,
      'ss',
      '-Htn',
      'state',
      'established',
      'dst',
      `${address}:${port}`,
    ]);
    return stdout
      .split('\n')
      .map((l) => l.trim().split(/\s+/))
      .filter((f) => f.length >= 4)
      .map((f) => f[f.length - 2] as string);
  }

  /** Removes the hosts (their processes keep running, without a network) and the bridge. */
  async close(): Promise<void> {
    this.closeSync();
  }

  /** `close()` for an exit hook: synchronous, errors ignored. */
  closeSync(): void {
    if (this.closed) return;
    this.closed = true;
    open.delete(this);
    for (const h of this.hosts) {
      quiet(IP, ['link', 'del', h.rootIf]);
      quiet(IP, ['netns', 'del', h.ns]);
    }
    quiet(IP, ['link', 'del', this.bridge]);
  }
}

async function ip(...args: string[]): Promise<void> {
  try {
    await run(IP, args);
  } catch (err) {
    const stderr = (err as { stderr?: string }).stderr?.trim();
    throw new Error(`ip ${args.join(' ')}: ${stderr || String(err)}`);
  }
}

function quiet(bin: string, args: string[]): void {
  try {
    execFileSync(bin, args, { stdio: 'pipe' });
  } catch {
    // already gone
  }
}

/** A /24 of 10.213.0.0/16 that no interface uses, starting from one derived from the pid. */
function freeSubnet(): number {
  const used = execFileSync(IP, ['-o', '-4', 'addr', 'show']).toString();
  const start = (process.pid * 7 + seq) % 250;
  for (let k = 0; k < 250; k++) {
    const s = ((start + k) % 250) + 1;
    if (!used.includes(` ${PREFIX}.${s}.`)) return s;
  }
  throw new Error(`no free /24 left in ${PREFIX}.0.0/16`);
}

/** Removes the namespaces and links left by test processes that died without cleaning up. */
function removeStale(): void {
  const deadPid = (tag: string) => {
    const pid = Number.parseInt(tag.slice(0, 5), 36);
    if (!Number.isInteger(pid) || pid <= 0 || pid === process.pid) return false;
    try {
      process.kill(pid, 0);
      return false;
    } catch (err) {
      return (err as NodeJS.ErrnoException).code === 'ESRCH';
    }
  };
  for (const line of execFileSync(IP, ['netns', 'list']).toString().split('\n')) {
    const m = /^cyclone-([0-9a-z]{6})-h\d+/.exec(line);
    if (m?.[1] && deadPid(m[1])) quiet(IP, ['netns', 'del', m[0]]);
  }
  // cyb<tag> (a bridge) and cyh<tag><index> (a host's veth end; its peer goes with it).
  for (const line of execFileSync(IP, ['-o', 'link', 'show']).toString().split('\n')) {
    const m = /^\d+: (cy[bh]([0-9a-z]{6})\d*)[@:]/.exec(line);
    if (m?.[1] && m[2] && deadPid(m[2])) quiet(IP, ['link', 'del', m[1]]);
  }
}
