/** The `cyclone` CLI as a child process, for the CLI tests (cli.test.ts, cleanup.test.ts). */
import { spawn } from 'node:child_process';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/** packages/core: the child's working directory. */
export const PACKAGE_DIR = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

/** What a CLI run printed and its exit code. */
export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
}

/**
 * Runs `node <nodeArgs> <args>` in packages/core with DATABASE_URL set to `databaseUrl`.
 * @returns its exit code (-1 when killed by a signal) and everything it printed.
 */
export function spawnCli(
  databaseUrl: string,
  nodeArgs: string[],
  args: string[],
): Promise<CliResult> {
  return new Promise((resolveRun, reject) => {
    const child = spawn(process.execPath, [...nodeArgs, ...args], {
      cwd: PACKAGE_DIR,
      env: { ...process.env, DATABASE_URL: databaseUrl },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c) => (stdout += c));
    child.stderr.on('data', (c) => (stderr += c));
    child.on('error', reject);
    child.on('close', (code) => resolveRun({ code: code ?? -1, stdout, stderr }));
  });
}
