/**
 * `pnpm soak [options]` (see options.ts for the list, or `pnpm soak --help`): runs one soak and
 * prints its report (tables, or JSON with `--json`); the JSON is also written to
 * `<out>/report.json`. Exit code 0 when every invariant holds, 1 when one fails (or the soak
 * itself could not run), 2 on bad usage.
 */
import { parseOptions, USAGE, UsageError } from './options.js';
import { formatReport } from './report.js';
import { runSoak } from './soak.js';

async function main(): Promise<number> {
  let options: ReturnType<typeof parseOptions>;
  try {
    options = parseOptions(process.argv.slice(2));
  } catch (err) {
    if (err instanceof UsageError) {
      process.stderr.write(`soak: ${err.message}\n\n${USAGE}\n`);
      return 2;
    }
    throw err;
  }
  if (options === 'help') {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  const log = (line: string) => process.stderr.write(`${line}\n`);
  try {
    const { report, outDir } = await runSoak(options, log);
    process.stdout.write(
      options.json ? `${JSON.stringify(report, null, 2)}\n` : `${formatReport(report)}\n`,
    );
    log(`soak: report written to ${outDir}/report.json`);
    return report.ok ? 0 : 1;
  } catch (err) {
    log(`soak: could not run: ${(err as Error)?.stack ?? String(err)}`);
    return 1;
  }
}

const code = await main();
process.stdout.write('', () => process.exit(code));
