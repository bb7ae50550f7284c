// The pre-release checks of every published package (docs/design/CONVENTIONS.md § Packages as
// users install them), run on the tarballs `pnpm pack` makes, i.e. what npm would get:
//
//   node scripts/check-packages.mjs [--pack-destination DIR] [--json]
//
// (`pnpm check-packages` builds first, then runs this.) For each non-private package under
// packages/: `pnpm pack` (which rewrites `workspace:` ranges), `publint --strict`,
// `attw --profile esm-only`, and the checks below on the tarball itself. Exits 1 when any check
// fails. The tarballs go to a temporary directory, removed afterwards, unless
// `--pack-destination` names one to keep them in (the consumer test installs them from there).
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const run = promisify(execFile);
const root = resolve(fileURLToPath(import.meta.url), '../..');
const bin = (name) => join(root, 'node_modules/.bin', name);
const rootManifest = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));

/** The published packages: every package.json under packages/ without `"private": true`. */
export function publishedPackages() {
  return readdirSync(join(root, 'packages'), { withFileTypes: true })
    .filter((d) => d.isDirectory() && existsSync(join(root, 'packages', d.name, 'package.json')))
    .map((d) => {
      const dir = join(root, 'packages', d.name);
      return { dir, manifest: JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) };
    })
    .filter((p) => p.manifest.private !== true);
}

/** `pnpm pack` of the package in `dir` into `dest`; resolves with the tarball's path. */
export async function pack(dir, dest) {
  const { stdout } = await run('pnpm', ['pack', '--json', '--pack-destination', dest], {
    cwd: dir,
    maxBuffer: 16 << 20,
  });
  // pnpm prints the JSON summary last; earlier lines may be lifecycle output.
  const json = JSON.parse(stdout.slice(stdout.indexOf('{')));
  return json.filename;
}

/** Lists the files of a tarball (paths without the leading `package/`). */
async function tarballFiles(tgz) {
  const { stdout } = await run('tar', ['tzf', tgz], { maxBuffer: 16 << 20 });
  return stdout
    .split('\n')
    .filter(Boolean)
    .map((f) => f.replace(/^package\//, ''));
}

async function tarballJson(tgz) {
  const { stdout } = await run('tar', ['xzf', tgz, '-O', 'package/package.json']);
  return JSON.parse(stdout);
}

/** Every file path an `exports` map points to (all conditions). */
function exportTargets(exp) {
  if (typeof exp === 'string') return [exp];
  if (!exp || typeof exp !== 'object') return [];
  return Object.values(exp).flatMap(exportTargets);
}

/** Our own checks on a packed tarball; returns a list of problems (empty: fine). */
async function checkTarball(tgz, source) {
  const problems = [];
  const files = new Set(await tarballFiles(tgz));
  const pkg = await tarballJson(tgz);
  const name = pkg.name;

  for (const field of ['dependencies', 'peerDependencies', 'optionalDependencies']) {
    for (const [dep, range] of Object.entries(pkg[field] ?? {})) {
      if (/^(workspace|link|file):/.test(range)) problems.push(`${field}.${dep} is "${range}"`);
      if (dep.startsWith('@cyclone/') && field !== 'peerDependencies')
        problems.push(`${dep} must be a peer dependency (one engine per app), not in ${field}`);
    }
  }
  if (pkg.type !== 'module') problems.push('"type" is not "module"');
  if (!pkg.engines?.node) problems.push('no engines.node');
  if (!pkg.license) problems.push('no license');
  if (!pkg.description) problems.push('no description');
  // Where npm's "Repository", "Homepage" and "Issues" links go: the root manifest's repository,
  // this package's folder in it.
  const repo = rootManifest.repository?.url;
  const base = String(repo ?? '')
    .replace(/^git\+/, '')
    .replace(/\.git$/, '');
  const dir = relative(root, source).split(sep).join('/');
  if (pkg.repository?.url !== repo || pkg.repository?.directory !== dir)
    problems.push(`repository is not { url: "${repo}", directory: "${dir}" }`);
  if (pkg.homepage !== `${base}/tree/main/${dir}#readme`)
    problems.push(`homepage is not ${base}/tree/main/${dir}#readme`);
  if ((pkg.bugs?.url ?? pkg.bugs) !== rootManifest.bugs)
    problems.push(`bugs is not ${rootManifest.bugs}`);
  if (pkg.publishConfig?.access !== 'public') problems.push('publishConfig.access is not public');
  if (!files.has('README.md')) problems.push('no README.md in the tarball (npm shows it)');
  for (const f of files) {
    if (/(^|\/)(test|tests|__tests__)\//.test(f) || /\.test(-d)?\.[cm]?[jt]s$/.test(f))
      problems.push(`a test file is packed: ${f}`);
  }
  for (const target of exportTargets(pkg.exports)) {
    const path = target.replace(/^\.\//, '');
    if (!files.has(path)) problems.push(`exports target ${target} is not in the tarball`);
  }
  for (const [cmd, target] of Object.entries(
    typeof pkg.bin === 'string' ? { [name]: pkg.bin } : (pkg.bin ?? {}),
  )) {
    const path = target.replace(/^\.\//, '');
    if (!files.has(path)) {
      problems.push(`bin ${cmd} (${target}) is not in the tarball`);
      continue;
    }
    const { stdout } = await run('tar', ['xzf', tgz, '-O', `package/${path}`]);
    if (!stdout.startsWith('#!/usr/bin/env node')) problems.push(`bin ${cmd} has no node shebang`);
  }
  // Migrations ship inside the package, embedded in dist at build time: the generated module
  // must be packed and hold every migration of the package's source folder.
  const migrationsDir =
    name === '@cyclone/core' ? join(root, 'migrations') : join(source, 'migrations');
  if (existsSync(migrationsDir)) {
    const sql = readdirSync(migrationsDir).filter((f) => /^\d{6}_[a-z0-9_]+\.sql$/.test(f));
    if (!files.has('dist/migrations.generated.js')) {
      problems.push('dist/migrations.generated.js is not in the tarball');
    } else {
      const { stdout } = await run(
        'tar',
        ['xzf', tgz, '-O', 'package/dist/migrations.generated.js'],
        {
          maxBuffer: 16 << 20,
        },
      );
      for (const f of sql) {
        if (!stdout.includes(JSON.stringify(f.replace(/\.sql$/, ''))))
          problems.push(`migration ${f} is not embedded in dist (stale build?)`);
      }
    }
    for (const f of files) if (f.endsWith('.sql')) problems.push(`a .sql file is packed: ${f}`);
  }
  return problems;
}

/** Runs a tool; resolves with `{ ok, output }` whatever its exit code. */
async function tool(cmd, args, cwd) {
  try {
    const { stdout, stderr } = await run(cmd, args, { cwd, maxBuffer: 16 << 20 });
    return { ok: true, output: `${stdout}${stderr}` };
  } catch (e) {
    return { ok: false, output: `${e.stdout ?? ''}${e.stderr ?? ''}` || String(e) };
  }
}

/**
 * Packs and checks every published package. Resolves with one result per package:
 * `{ name, tarball, publint, attw, problems }`, where `publint`/`attw` are `{ ok, output }`.
 */
export async function checkPackages(dest) {
  const packages = publishedPackages();
  // Pack one at a time (pnpm pack is quick); lint two at a time (two cores here).
  const packed = [];
  for (const p of packages) packed.push({ ...p, tarball: await pack(p.dir, dest) });
  const results = [];
  const queue = [...packed];
  const workers = Array.from({ length: 2 }, async () => {
    for (let p = queue.shift(); p; p = queue.shift()) {
      const [publint, attw, problems] = await Promise.all([
        tool(bin('publint'), ['run', p.tarball, '--strict', '--level', 'warning'], root),
        tool(bin('attw'), [p.tarball, '--profile', 'esm-only', '--no-color', '--no-emoji'], root),
        checkTarball(p.tarball, p.dir),
      ]);
      results.push({ name: p.manifest.name, tarball: p.tarball, publint, attw, problems });
    }
  });
  await Promise.all(workers);
  const order = packages.map((p) => p.manifest.name);
  return results.sort((a, b) => order.indexOf(a.name) - order.indexOf(b.name));
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const args = process.argv.slice(2);
  const destIndex = args.indexOf('--pack-destination');
  const keep = destIndex >= 0 ? resolve(args[destIndex + 1] ?? '') : undefined;
  const dest = keep ?? mkdtempSync(join(tmpdir(), 'cyclone-packs-'));
  let failed = false;
  try {
    const results = await checkPackages(dest);
    for (const r of results) {
      const ok = r.publint.ok && r.attw.ok && r.problems.length === 0;
      failed ||= !ok;
      if (args.includes('--json')) continue;
      console.log(`${ok ? 'ok  ' : 'FAIL'} ${r.name}`);
      if (!r.publint.ok) console.log(indent(`publint:\n${r.publint.output}`));
      if (!r.attw.ok) console.log(indent(`attw:\n${r.attw.output}`));
      for (const p of r.problems) console.log(indent(`- ${p}`));
    }
    if (args.includes('--json')) console.log(JSON.stringify(results, null, 2));
    else
      console.log(
        failed
          ? 'check-packages: some packages would not work as published'
          : `check-packages: ${results.length} packages pass publint --strict, attw --profile esm-only and the tarball checks`,
      );
  } finally {
    if (!keep) rmSync(dest, { recursive: true, force: true });
  }
  process.exit(failed ? 1 : 0);
}

function indent(s) {
  return s
    .trimEnd()
    .split('\n')
    .map((l) => `    ${l}`)
    .join('\n');
}
