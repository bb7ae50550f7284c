/**
 * Real worker child processes for the crash tests: spawned with
 * `node --conditions=@cyclone/source --import tsx crash-worker.ts` (the export condition makes
 * `@cyclone/core` resolve to src/index.ts, as in vitest), talked to through stdout lines, and
 * killed with real signals. Every child spawned is tracked; `killAllChildren()` (afterEach /
 * afterAll) and a process `exit` hook make sure none outlives its test, even a failed one.
 */
import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { dirname, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
/** packages/core: the children's cwd, from which `tsx` and `@cyclone/core` resolve. */
const PACKAGE_DIR = resolve(here, '../..');
const WORKER_SCRIPT = resolve(here, 'crash-worker.ts');

export interface SpawnOptions {
  /** Database of the test file. */
  databaseUrl: string;
  /** Stop at the run's crash point (crash-workflows.ts). Default false. */
  victim?: boolean;
  leaseMs?: number;
  sweepIntervalMs?: number;
  pollIntervalMs?: number;
  /** Name in diagnostics. */
  label?: string;
  /** How long to wait for `READY`. Default 20 s. */
  readyTimeoutMs?: number;
}

export interface ExitInfo {
  code: number | null;
  signal: NodeJS.Signals | null;
}

const live = new Set<ChildWorker>();

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
  /** The worker's id (lease owner), from the READY line. */
  workerId = '';
  private stderrText = '';
  private listeners = new Set<() => void>();

  constructor(proc: ChildProcessWithoutNullStreams, label: string) {
    this.proc = proc;
    this.label = label;
    live.add(this);
    this.exited = new Promise((resolveExit) => {
      proc.on('exit', (code, signal) => {
        this.exit = { code, signal };
        live.delete(this);
        this.notify();
        resolveExit(this.exit);
      });
    });
    proc.on('error', (err) => {
      this.stderrText += `\n[spawn error] ${err.message}`;
    });
    createInterface({ input: proc.stdout }).on('line', (line) => {
      this.lines.push(line);
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

  /** The child's stderr (its worker logs at warn and above), last 20 kB. */
  get stderr(): string {
    return this.stderrText;
  }

  private notify(): void {
    for (const l of [...this.listeners]) l();
  }

  /** A short description for assertion messages. */
  describe(): string {
    return `${this.label} (pid ${this.pid}, exit ${JSON.stringify(this.exit ?? null)})\nstdout:\n${this.lines.join('\n')}\nstderr (tail):\n${this.stderrText.slice(-3000)}`;
  }

  /**
   * Resolves with the first stdout line (already seen or to come) matching `pattern`.
   * @throws when the child exits first or after `timeoutMs`.
   */
  waitForLine(pattern: RegExp, timeoutMs = 20_000): Promise<RegExpMatchArray> {
    return new Promise((resolveLine, reject) => {
      const check = () => {
        for (const line of this.lines) {
          const m = line.match(pattern);
          if (m) return finish(() => resolveLine(m));
        }
        if (this.exit) {
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
        clearTimeout(timer);
        this.listeners.delete(check);
        fn();
      };
      this.listeners.add(check);
      check();
    });
  }

  /** Sends `signal` (default SIGKILL) and waits for the exit. */
  async kill(signal: NodeJS.Signals = 'SIGKILL'): Promise<ExitInfo> {
    if (this.exit) return this.exit;
    this.proc.kill(signal);
    return this.exited;
  }
}

/** Spawns crash-worker.ts and waits for its `READY` line. */
export async function spawnCrashWorker(options: SpawnOptions): Promise<ChildWorker> {
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    DATABASE_URL: options.databaseUrl,
    CRASH_VICTIM: options.victim ? '1' : '0',
    CRASH_LEASE_MS: String(options.leaseMs ?? 1000),
    CRASH_SWEEP_MS: String(options.sweepIntervalMs ?? 250),
    CRASH_POLL_MS: String(options.pollIntervalMs ?? 100),
  };
  // vitest's own loader flags must not leak into the child.
  delete env.NODE_OPTIONS;
  const proc = spawn(
    process.execPath,
    ['--conditions=@cyclone/source', '--import', 'tsx', WORKER_SCRIPT],
    { cwd: PACKAGE_DIR, env, stdio: ['pipe', 'pipe', 'pipe'] },
  );
  const child = new ChildWorker(proc, options.label ?? (options.victim ? 'victim' : 'rescuer'));
  const m = await child.waitForLine(/^READY (\d+) (\S+)$/, options.readyTimeoutMs ?? 20_000);
  child.workerId = m[2] ?? '';
  return child;
}

/** SIGKILLs every child still alive (SIGKILL also ends a SIGSTOPped one) and waits for them. */
export async function killAllChildren(): Promise<void> {
  await Promise.all([...live].map((c) => c.kill('SIGKILL')));
}

/** Children alive now. */
export function liveChildren(): number {
  return live.size;
}

// Last resort when the test process exits without running its hooks.
process.once('exit', () => {
  for (const c of live) {
    try {
      c.proc.kill('SIGKILL');
    } catch {
      // already gone
    }
  }
});
