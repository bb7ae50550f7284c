/**
 * The worker processes: `slots` of them, each a `worker-main.ts` child started with
 * `node --conditions=@cyclone/source --import tsx` and an IPC channel. A slot whose process is
 * killed on purpose gets a new process (a restart); one that dies on its own is an UNEXPECTED
 * exit (an engine or adapter bug: the checker fails the soak), restarted too so the soak goes on.
 * Each process's stdout and stderr go to `<logDir>/worker-<slot>.<generation>.log`.
 */
import { type ChildProcess, fork, spawn } from 'node:child_process';
import { createWriteStream, type WriteStream } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { OrchestratorMessage, WorkerEnv, WorkerMessage } from './protocol.js';

const WORKER_SCRIPT = fileURLToPath(new URL('./worker-main.ts', import.meta.url));

export interface WorkerProcess {
  slot: number;
  generation: number;
  proc: ChildProcess;
  pid: number;
  workerId: string;
  ready: boolean;
  /** Set when the orchestrator killed or stopped it on purpose. */
  expectedExit: boolean;
  exit?: { code: number | null; signal: NodeJS.Signals | null; at: number };
  logFile: string;
}

export interface UnexpectedExit {
  slot: number;
  workerId: string;
  code: number | null;
  signal: NodeJS.Signals | null;
  at: number;
  logFile: string;
}

export interface FleetOptions {
  slots: number;
  logDir: string;
  /** The environment of slot `i` (its database URL carries `application_name=soak-w<i>`). */
  envFor(slot: number): WorkerEnv;
  /**
   * A command that runs slot `i`'s node in place (`ip netns exec <ns>`: a host of its own, for
   * the partition fault), or undefined to fork it directly.
   */
  wrapFor?(slot: number): string[] | undefined;
  onMessage(w: WorkerProcess, m: WorkerMessage): void;
}

export class Fleet {
  private readonly current = new Map<number, WorkerProcess>();
  private readonly all: WorkerProcess[] = [];
  readonly unexpectedExits: UnexpectedExit[] = [];
  private closing = false;

  constructor(private readonly options: FleetOptions) {}

  /** Starts every slot and waits until each worker is ready. */
  async start(): Promise<void> {
    await Promise.all(Array.from({ length: this.options.slots }, (_, i) => this.spawn(i)));
  }

  /** Workers running now (ready ones only). */
  live(): WorkerProcess[] {
    return [...this.current.values()].filter((w) => w.ready && !w.exit);
  }

  /** The number of slots. */
  get slotCount(): number {
    return this.options.slots;
  }

  /** True when `slot` has a process that has not exited (ready or starting). */
  hasLive(slot: number): boolean {
    const w = this.current.get(slot);
    return w !== undefined && !w.exit;
  }

  /** Every worker id ever started, by id. */
  byWorkerId(id: string): WorkerProcess | undefined {
    return this.all.find((w) => w.workerId === id);
  }

  /** All processes ever started. */
  processes(): readonly WorkerProcess[] {
    return this.all;
  }

  /** Starts a new process in `slot` and resolves when it is ready (or rejects after 60 s). */
  spawn(
    slot: number,
    generation = this.all.filter((w) => w.slot === slot).length,
  ): Promise<WorkerProcess> {
    const logFile = join(this.options.logDir, `worker-${slot}.${generation}.log`);
    const log: WriteStream = createWriteStream(logFile);
    const env = { ...process.env, ...this.options.envFor(slot) } as NodeJS.ProcessEnv;
    delete env.NODE_OPTIONS;
    const execArgv = ['--conditions=@cyclone/source', '--import', 'tsx'];
    const wrap = this.options.wrapFor?.(slot);
    // The wrapper execs node with the IPC channel's descriptor inherited, as fork() would.
    const proc = wrap?.length
      ? spawn(wrap[0] as string, [...wrap.slice(1), process.execPath, ...execArgv, WORKER_SCRIPT], {
          env,
          stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
        })
      : fork(WORKER_SCRIPT, [], { execArgv, env, stdio: ['ignore', 'pipe', 'pipe', 'ipc'] });
    proc.stdout?.pipe(log, { end: false });
    proc.stderr?.pipe(log, { end: false });
    const w: WorkerProcess = {
      slot,
      generation,
      proc,
      pid: proc.pid ?? -1,
      workerId: '',
      ready: false,
      expectedExit: false,
      logFile,
    };
    this.current.set(slot, w);
    this.all.push(w);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        proc.kill('SIGKILL');
        reject(new Error(`worker ${slot}.${generation} not ready within 60 s (log: ${logFile})`));
      }, 60_000);
      proc.on('message', (m: WorkerMessage) => {
        if (m.t === 'ready') {
          w.workerId = m.workerId;
          w.ready = true;
          clearTimeout(timer);
          resolve(w);
        }
        this.options.onMessage(w, m);
      });
      proc.on('exit', (code, signal) => {
        clearTimeout(timer);
        w.exit = { code, signal, at: Date.now() };
        setTimeout(() => log.end(), 200);
        if (!w.ready)
          reject(new Error(`worker ${slot}.${generation} exited before ready (log: ${logFile})`));
        if (!w.expectedExit && !this.closing) {
          this.unexpectedExits.push({
            slot,
            workerId: w.workerId,
            code,
            signal,
            at: w.exit.at,
            logFile,
          });
          // Keep the soak going: the slot gets a new worker.
          if (this.current.get(slot) === w) {
            setTimeout(() => {
              if (!this.closing) this.spawn(slot).catch(() => {});
            }, 500);
          }
        }
      });
    });
  }

  /** SIGKILLs the worker of `slot` and waits for its exit. */
  async kill(slot: number): Promise<WorkerProcess | undefined> {
    const w = this.current.get(slot);
    if (!w || w.exit) return undefined;
    w.expectedExit = true;
    const exited = new Promise<void>((r) => (w.exit ? r() : w.proc.once('exit', () => r())));
    w.proc.kill('SIGKILL');
    await exited;
    return w;
  }

  /** Asks the worker of `slot` to block its event loop for `ms`. */
  block(slot: number, ms: number): boolean {
    const w = this.current.get(slot);
    if (!w || w.exit || !w.proc.connected) return false;
    w.proc.send({ t: 'block', ms } satisfies OrchestratorMessage);
    return true;
  }

  /** Stops every worker gracefully (SIGKILL after `graceMs`). */
  async stop(graceMs = 15_000): Promise<void> {
    this.closing = true;
    const live = [...this.current.values()].filter((w) => !w.exit);
    await Promise.all(
      live.map(async (w) => {
        w.expectedExit = true;
        const exited = new Promise<void>((r) => (w.exit ? r() : w.proc.once('exit', () => r())));
        if (w.proc.connected) w.proc.send({ t: 'stop' } satisfies OrchestratorMessage);
        else w.proc.kill('SIGTERM');
        const t = setTimeout(() => w.proc.kill('SIGKILL'), graceMs);
        await exited;
        clearTimeout(t);
      }),
    );
  }

  /** SIGKILLs everything still alive (the last resort at exit). */
  killAll(): void {
    this.closing = true;
    for (const w of this.all) {
      if (!w.exit) {
        w.expectedExit = true;
        try {
          w.proc.kill('SIGKILL');
        } catch {
          // gone
        }
      }
    }
  }
}
