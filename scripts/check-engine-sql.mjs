#!/usr/bin/env node
// Fails when the engine's tables (cyclone_runs, cyclone_steps) are named in a package's source
// outside packages/core/src/sql/: every statement on them lives there, so that one module per
// stage answers "which statements touch this table". Generated migration files are exempt (they
// define the tables). Usage: node scripts/check-engine-sql.mjs [root]; exit 1 with the places.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = process.argv[2] ?? join(fileURLToPath(new URL('.', import.meta.url)), '..');
const TABLES = /\bcyclone_(runs|steps)\b/;
const ALLOWED = `packages${sep}core${sep}src${sep}sql${sep}`;

/** Every .ts/.js/.mjs file below `dir`, skipping node_modules and dist. */
function* sources(dir) {
  for (const name of readdirSync(dir)) {
    if (name === 'node_modules' || name === 'dist') continue;
    const path = join(dir, name);
    if (statSync(path).isDirectory()) yield* sources(path);
    else if (/\.(ts|mts|js|mjs)$/.test(name) && !name.endsWith('.generated.ts')) yield path;
  }
}

const found = [];
let files = 0;
for (const pkg of readdirSync(join(root, 'packages'))) {
  const src = join(root, 'packages', pkg, 'src');
  try {
    statSync(src);
  } catch {
    continue;
  }
  for (const file of sources(src)) {
    files++;
    const rel = relative(root, file);
    if (rel.startsWith(ALLOWED)) continue;
    readFileSync(file, 'utf8')
      .split('\n')
      .forEach((line, i) => {
        if (TABLES.test(line)) found.push(`${rel}:${i + 1}: ${line.trim()}`);
      });
  }
}
if (files === 0) {
  console.error(`check-engine-sql: no source files under ${join(root, 'packages')}`);
  process.exit(1);
}
if (found.length > 0) {
  console.error(
    `check-engine-sql: the engine's tables are named outside packages/core/src/sql/ (${found.length}):`,
  );
  for (const f of found) console.error(`  ${f}`);
  console.error(
    'Put the statement in a module under packages/core/src/sql/ and call it from there.',
  );
  process.exit(1);
}
console.log(`check-engine-sql: ${files} source files, no engine table named outside core/src/sql/`);
