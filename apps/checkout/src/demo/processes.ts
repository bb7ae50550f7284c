/**
 * The demo's child processes: the API and the workers, each a `node` process started with this
 * process's loader flags (tsx and the source condition), talking through stdout lines
 * (`LISTENING <url>`, `READY <pid> <workerId>`), with stderr appended to a log file.
 */
import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { createWriteStream, type WriteStream } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

export class Child {
  readonly proc: ChildProcessWithoutNullStreams;
  /** Resolves with the first stdout line matching `ready`; rejects if the process exits first. */
  readonly ready: Promise<RegExpMatchArray>;
  /** Resolves once the process has exited. */
  readonly exited: Promise<void>;
  private readonly log: WriteStream;

  constructor(
    readonly name: string,
    script: string,
    env: Record<string, string>,
    logDir: string,
    ready: RegExp,
  ) {
    this.log = createWriteStream(join(logDir, `${name}.log`), { flags: 'a' });
    this.proc = spawn(process.execPath, [...process.execArgv, script], {
      env: { ...process.env, ...env },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    this.proc.stderr.pipe(this.log, { end: false });
    this.exited = new Promise((r) => this.proc.once('exit', () => r()));
    this.ready = new Promise((resolve, reject) => {
      createInterface({ input: this.proc.stdout }).on('line', (line) => {
        const m = line.match(ready);
        if (m) resolve(m);
      });
      this.proc.once('exit', (code, signal) =>
        reject(
          new Error(
            `${name} exited before it was ready (${signal ?? `exit ${code}`}); see ${join(logDir, `${name}.log`)}`,
          ),
        ),
      );
    });
    this.ready.catch(() => {}); // observed by whoever awaits it
  }

  get pid(): number {
    return this.proc.pid ?? -1;
  }

  get alive(): boolean {
    return this.proc.exitCode === null && this.proc.signalCode === null;
  }

  /** SIGKILL: the process dies at whatever instruction it is on. */
  async kill(): Promise<void> {
    if (this.alive) this.proc.kill('SIGKILL');
    await this.exited;
  }

  /** SIGTERM and wait (a graceful stop), SIGKILL after `ms`. */
  async stop(ms = 5_000): Promise<void> {
    if (!this.alive) return;
    this.proc.kill('SIGTERM');
    const t = setTimeout(() => this.proc.kill('SIGKILL'), ms);
    await this.exited;
    clearTimeout(t);
    this.log.end();
  }
}

/** A worker process, with the worker id it announced and its connections' application_name. */
export class WorkerChild extends Child {
  workerId = '';
  appName = '';

  /**
   * Starts `script` with `DATABASE_URL` carrying `application_name=<appName>`, so that the
   * server's sessions of this process can be told apart (`pg_stat_activity`).
   */
  static async start(
    name: string,
    script: string,
    env: Record<string, string>,
    logDir: string,
    appName: string,
  ): Promise<WorkerChild> {
    const url = withApplicationName(env.DATABASE_URL ?? '', appName);
    const w = new WorkerChild(name, script, { ...env, DATABASE_URL: url }, logDir, READY);
    w.appName = appName;
    const m = await w.ready;
    w.workerId = m[2] ?? '';
    return w;
  }
}

const READY = /^READY (\d+) (\S+)$/;

/** `url` with its `application_name` parameter set (unchanged if it is not a URL). */
function withApplicationName(url: string, appName: string): string {
  try {
    const u = new URL(url);
    u.searchParams.set('application_name', appName);
    return u.toString();
  } catch {
    return url;
  }
}
