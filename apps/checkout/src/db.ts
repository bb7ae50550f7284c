/**
 * The database: `DATABASE_URL`, else the embedded PostgreSQL of `@cyclone/core/embedded`, with
 * its data in `.cyclone/` of the directory the command was typed in (pnpm's `INIT_CWD`), the
 * same server the `cyclone` CLI and the other examples use (a running one is reused).
 */
import { resolve } from 'node:path';
import { type ResolvedDatabase, resolveDatabaseUrl } from '@cyclone/core/embedded';

/** `.cyclone/` of the directory the command was typed in. */
export function cycloneDir(): string {
  return resolve(process.env.INIT_CWD ?? process.cwd(), '.cyclone');
}

/** `DATABASE_URL`, else the embedded server (started, or reused when already running). */
export function resolveDatabase(): Promise<ResolvedDatabase> {
  return resolveDatabaseUrl({ dir: cycloneDir() });
}
