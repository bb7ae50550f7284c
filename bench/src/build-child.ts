/**
 * Bundles the worker child (child.ts, the system modules and `@cyclone/core`'s source) into
 * plain JavaScript with esbuild, once per harness run. Children then run on plain `node`, like
 * the peers' published JavaScript: no TypeScript loader in their memory, CPU or start-up time.
 * Code splitting keeps each system in its own chunk, so a child loads only its own system and
 * its libraries (which stay external: `pg`, `graphile-worker`, `pg-boss`).
 */
import { execFile } from 'node:child_process';
import { rmSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { build } from 'esbuild';

export const BENCH_DIR = resolve(dirname(fileURLToPath(import.meta.url)), '..');

/** Builds the bundle (under bench/node_modules/.cache, so externals resolve from bench). */
export async function buildChild(): Promise<string> {
  const outdir = join(BENCH_DIR, 'node_modules/.cache/cyclone-bench');
  rmSync(outdir, { recursive: true, force: true });
  await build({
    entryPoints: [join(BENCH_DIR, 'src/child.ts')],
    outdir,
    bundle: true,
    splitting: true,
    format: 'esm',
    platform: 'node',
    target: 'node20',
    outExtension: { '.js': '.mjs' },
    // `@cyclone/core` from its source, as the workspace has it now.
    conditions: ['@cyclone/source'],
    external: ['pg', 'graphile-worker', 'pg-boss', 'zod'],
    logLevel: 'warning',
  });
  return join(outdir, 'child.mjs');
}

/** Peak RSS (MiB) of a bare Node process that loads `pg`: the floor under every worker child. */
export async function baselineRssMiB(): Promise<number> {
  const { stdout } = await promisify(execFile)(
    process.execPath,
    ['-e', "require('pg'); console.log(process.resourceUsage().maxRSS)"],
    { cwd: BENCH_DIR },
  );
  return Number(stdout.trim()) / 1024;
}
