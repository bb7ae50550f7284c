/**
 * The child's side of child.ts, for the worker scripts: write protocol lines to stdout and
 * announce readiness in the form `spawnWorker` waits for.
 */

/** Writes one line to stdout, for the parent test to wait on (`ChildWorker.waitForLine`). */
export function emitLine(line: string): void {
  process.stdout.write(`${line}\n`);
}

/** Writes `READY <pid>` (with ` <workerId>` when given): the worker runs. */
export function announceReady(workerId?: string): void {
  emitLine(workerId ? `READY ${process.pid} ${workerId}` : `READY ${process.pid}`);
}

/** The environment variable `name`. @throws when it is unset or empty. */
export function requireEnv(name: string): string {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is required`);
  return v;
}

/** The environment variable `name` as a number, `fallback` when unset or empty. */
export function envNumber(name: string, fallback: number): number {
  const v = process.env[name];
  return v ? Number(v) : fallback;
}
