/**
 * Real worker child processes for the crash tests: a package's worker script runs as
 * `node --conditions=@cyclone/source --import tsx <script>` (the export condition makes the
 * workspace packages resolve to their sources, as in vitest), is talked to through stdout lines
 * and killed with real signals.
 *
 * The script announces itself with `announceReady()` (worker-process.ts): a `READY <pid>` line,
 * with the worker's id when it has one. Every child spawned is tracked: `killAllChildren()` (in
 * afterEach / afterAll) and a process `exit` hook make sure none outlives its test, even a
 * failed one.
 */
import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { ExitTracked } from './exit-hooks.js';

/** How a child ended. */
export interface ExitInfo {
  code: number | null;
  signal: NodeJS.Signals | null;
}

/** The module that maps an SDK to its alias in a child (sdk-alias.mjs). */
const SDK_ALIAS = new URL('./sdk-alias.mjs', import.meta.url).href;

/** The readiness line of `announceReady()`: `READY <pid>` or `READY <pid> <workerId>`. */
export const READY_LINE = /^READY (\d+)(?: (\S+))?$/;

// SIGKILLed if the test process ends without killing them.
const live = new ExitTracked<ChildWorker>((c) => c.proc.kill('SIGKILL'));

/** One worker child process. */
export class ChildWorker {
  readonly proc: ChildProcessWithoutNullStreams;
  readonly label: string;
  /** Stdout lines so far. */
  readonly lines: string[] = [];
  /** Resolves when the process has exited. */
  readonly exited: Promise<ExitInfo>;
  /** Set once exited. */
  exit: ExitInfo | undefined;
  /** The worker's id (lease owner), from the READY line; '' when it announced none. */
  workerId = '';
  /** True once the child's stdout has closed: no line is still to come. */
  private outputDone = false;
  private stderrText = '';
  private listeners = new Set<() => void>();

  constructor(proc: ChildProcessWithoutNullStreams, label: string) {
    this.proc = proc;
    this.label = label;
    live.add(this);
    let resolveExit!: (info: ExitInfo) => void;
    this.exited = new Promise((r) => {
      resolveExit = r;
    });
    const ended = (info: ExitInfo) => {
      if (this.exit) return;
      this.exit = info;
      live.delete(this);
      this.notify();
      resolveExit(info);
    };
    proc.on('exit', (code, signal) => ended({ code, signal }));
    proc.on('error', (err) => {
      this.stderrText += `\n[spawn error] ${err.message}`;
      // A process that never started emits no 'exit'.
      if (proc.pid === undefined) {
        this.outputDone = true;
        ended({ code: null, signal: null });
      }
    });
    createInterface({ input: proc.stdout })
      .on('line', (line) => {
        this.lines.push(line);
        this.notify();
      })
      .on('close', () => {
        this.outputDone = true;
        this.notify();
      });
    proc.stderr.setEncoding('utf8');
    proc.stderr.on('data', (chunk: string) => {
      this.stderrText = (this.stderrText + chunk).slice(-20_000);
    });
  }

  get pid(): number {
    return this.proc.pid ?? -1;
  }

  /** The child's stderr (its logs), last 20 kB. */
  get stderr(): string {
    return this.stderrText;
  }

  private notify(): void {
    for (const l of [...this.listeners]) l();
  }

  /** A short description for assertion messages: who, how it ended, stdout, stderr's tail. */
  describe(): string {
    return `${this.label} (pid ${this.pid}, exit ${JSON.stringify(this.exit ?? null)})\nstdout:\n${this.lines.join('\n')}\nstderr (tail):\n${this.stderrText.slice(-3000)}`;
  }

  /**
   * Resolves with the first stdout line (already seen or to come) matching `pattern`.
   * @throws when the child exited (and its output is read) without one, or after `timeoutMs`.
   */
  waitForLine(pattern: RegExp, timeoutMs = 20_000): Promise<RegExpMatchArray> {
    return new Promise((resolveLine, reject) => {
      let done = false;
      const check = () => {
        if (done) return;
        for (const line of this.lines) {
          const m = line.match(pattern);
          if (m) return finish(() => resolveLine(m));
        }
        if (this.exit && this.outputDone) {
          finish(() =>
            reject(new Error(`${pattern} never came: the child exited.\n${this.describe()}`)),
          );
        }
      };
      const timer = setTimeout(
        () =>
          finish(() =>
            reject(new Error(`${pattern} not seen within ${timeoutMs} ms.\n${this.describe()}`)),
          ),
        timeoutMs,
      );
      const finish = (fn: () => void) => {
        done = true;
        clearTimeout(timer);
        this.listeners.delete(check);
        fn();
      };
      this.listeners.add(check);
      check();
    });
  }

  /** Sends `signal` (default SIGKILL) unless the child has exited, and waits for the exit. */
  async kill(signal: NodeJS.Signals = 'SIGKILL'): Promise<ExitInfo> {
    if (this.exit) return this.exit;
    this.proc.kill(signal);
    return this.exited;
  }
}

export interface SpawnWorkerOptions {
  /** The worker script: an absolute path or a `file:` URL (`new URL('./w.ts', import.meta.url)`). */
  script: string | URL;
  /** Variables added to this process's environment. */
  env?: Record<string, string>;
  /** Name in diagnostics. Default: the script's file name. */
  label?: string;
  /** The line that says the worker runs; its 2nd group, if any, is the worker id. */
  ready?: RegExp;
  /** How long to wait for that line. Default 20 s. */
  readyTimeoutMs?: number;
  /** The child's cwd, from which `tsx` resolves. Default: the script's package directory. */
  cwd?: string;
  /**
   * A command that runs node, such as `['ip', 'netns', 'exec', ns]` for a host in a network
   * namespace (netns.ts); it must exec node in place, so the child's pid is node's.
   */
  wrap?: string[];
}

/**
 * Spawns `script` with `node --conditions=@cyclone/source --import tsx` and waits for its
 * readiness line (`READY_LINE` by default).
 * @throws when the child exits first or is not ready within `readyTimeoutMs`; it is killed then.
 */
export async function spawnWorker(options: SpawnWorkerOptions): Promise<ChildWorker> {
  const script =
    typeof options.script === 'string' ? options.script : fileURLToPath(options.script);
  const env: NodeJS.ProcessEnv = { ...process.env, ...options.env };
  // vitest's own loader flags must not leak into the child.
  delete env.NODE_OPTIONS;
  // An adapter's "lowest SDK" project: the child loads the SDK under its alias too.
  const aliases = env.CYCLONE_TEST_ALIASES ? ['--import', SDK_ALIAS] : [];
  const nodeArgs = ['--conditions=@cyclone/source', '--import', 'tsx', ...aliases, script];
  const [cmd, ...args] = [...(options.wrap ?? []), process.execPath, ...nodeArgs] as [
    string,
    ...string[],
  ];
  const proc = spawn(cmd, args, {
    cwd: options.cwd ?? packageDir(script),
    env,
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  const child = new ChildWorker(proc, options.label ?? basename(script));
  try {
    const m = await child.waitForLine(
      options.ready ?? READY_LINE,
      options.readyTimeoutMs ?? 20_000,
    );
    child.workerId = m[2] ?? '';
  } catch (err) {
    await child.kill('SIGKILL');
    throw err;
  }
  return child;
}

/** The nearest directory at or above `file`'s with a package.json. */
function packageDir(file: string): string {
  for (let dir = dirname(file); ; dir = dirname(dir)) {
    if (existsSync(join(dir, 'package.json'))) return dir;
    if (dirname(dir) === dir) return dirname(file);
  }
}

/** SIGKILLs every child still alive (SIGKILL also ends a SIGSTOPped one) and waits for them. */
export async function killAllChildren(): Promise<void> {
  await Promise.all([...live].map((c) => c.kill('SIGKILL')));
}

/** Children alive now. */
export function liveChildren(): number {
  return live.size;
}
