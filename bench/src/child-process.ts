/**
 * The harness side of a worker child process (see protocol.ts): spawn, read `@` lines, send
 * commands, kill. Every child is tracked so that none outlives the harness.
 */
import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { BENCH_DIR, buildChild } from './build-child.js';
import type { ChildSpec } from './protocol.js';

let childScript: string | undefined;

/** Builds the child bundle (build-child.ts); call once before spawning children. */
export async function prepareChildren(): Promise<void> {
  childScript = await buildChild();
}

const live = new Set<ChildWorker>();
process.on('exit', () => {
  for (const c of live) c.proc.kill('SIGKILL');
});

export class ChildWorker {
  readonly proc: ChildProcessWithoutNullStreams;
  readonly exited: Promise<number | null>;
  private readonly lines: string[] = [];
  private readonly waiters = new Set<() => void>();
  private readonly listeners: ((line: string) => void)[] = [];
  private stderr = '';
  private dead = false;

  /**
   * @param script another bundle of the child than this build's (row 13's variants).
   * @param nodeArgs options for `node` before the script (step-budget.ts: `--cpu-prof`).
   */
  constructor(
    readonly spec: ChildSpec,
    script = childScript,
    nodeArgs: readonly string[] = [],
  ) {
    if (!script) throw new Error('prepareChildren() was not called');
    this.proc = spawn(process.execPath, [...nodeArgs, script], {
      cwd: BENCH_DIR,
      env: { ...process.env, BENCH_CHILD: JSON.stringify(spec) },
    });
    live.add(this);
    this.exited = new Promise((res) => {
      this.proc.on('exit', (code) => {
        this.dead = true;
        live.delete(this);
        this.notify();
        res(code);
      });
    });
    createInterface({ input: this.proc.stdout }).on('line', (line) => {
      if (!line.startsWith('@')) return;
      for (const l of this.listeners) l(line);
      this.lines.push(line);
      this.notify();
    });
    this.proc.stderr.setEncoding('utf8');
    this.proc.stderr.on('data', (chunk: string) => {
      this.stderr = (this.stderr + chunk).slice(-8_000);
    });
  }

  get pid(): number {
    return this.proc.pid ?? -1;
  }

  /** Calls `fn` for every later `@` line. */
  onLine(fn: (line: string) => void): void {
    this.listeners.push(fn);
  }

  private notify(): void {
    for (const w of this.waiters) w();
  }

  /**
   * Resolves with the rest of the first unread line that starts with `tag` (e.g. `@READY`).
   * @throws when the child reports `@ERR`, exits, or `timeoutMs` passes.
   */
  async waitFor(tag: string, timeoutMs: number): Promise<string> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const i = this.lines.findIndex((l) => l === tag || l.startsWith(`${tag} `));
      if (i >= 0) {
        const line = this.lines.splice(i, 1)[0] as string;
        return line.slice(tag.length).trim();
      }
      const err = this.lines.find((l) => l.startsWith('@ERR'));
      if (err || this.dead || Date.now() >= deadline) {
        const why = err ?? (this.dead ? 'the child exited' : `timed out after ${timeoutMs} ms`);
        throw new Error(
          `${this.spec.system} ${this.spec.mode} child: waiting for ${tag}: ${why}\n${this.stderr.slice(-2_000)}`,
        );
      }
      await new Promise<void>((res) => {
        const wake = () => {
          this.waiters.delete(wake);
          clearTimeout(t);
          res();
        };
        const t = setTimeout(wake, Math.max(1, Math.min(deadline - Date.now(), 1_000)));
        this.waiters.add(wake);
      });
    }
  }

  /** Asks the child to stop and exit; SIGKILL if it has not after `graceMs`. */
  async exit(graceMs = 5_000): Promise<void> {
    if (this.dead) return;
    this.proc.stdin.write('EXIT\n');
    const t = setTimeout(() => this.proc.kill('SIGKILL'), graceMs);
    await this.exited;
    clearTimeout(t);
  }

  /** Sends a command line (protocol.ts). */
  send(command: string): void {
    if (!this.dead) this.proc.stdin.write(`${command}\n`);
  }

  kill(): void {
    this.proc.kill('SIGKILL');
  }
}
