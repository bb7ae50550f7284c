/**
 * The documentation cannot rot: every TypeScript sample in docs/*.md, the root README and the
 * package READMEs (what npm shows) compiles against the packages' source, and every relative
 * link points to a file that exists; every SQL block of docs/*.md runs on a database migrated by
 * every package (in a transaction rolled back afterwards).
 *
 * The samples are written to tools/docs-check/.samples/ (git-ignored), one module per sample,
 * with its prelude (tools/docs-check/preludes/) when its `<!-- sample: prelude=NAME -->`
 * directive names one (src/samples.ts), and compiled with one `tsc` run under the repository's
 * strict tsconfig; errors are reported at their line in the Markdown file.
 */
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';
import { promisify } from 'node:util';
import { Client } from '@cyclone/core';
import { migrateIdempotency } from '@cyclone/idempotency';
import { migrateSendgrid } from '@cyclone/sendgrid';
import { ADMIN_URL, urlFor } from '@cyclone/testkit';
import { migrateTwilio } from '@cyclone/twilio';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { brokenLinks, npmBrokenLinks } from '../src/links.js';
import { extractBlocks, extractSamples, type Sample } from '../src/samples.js';

const run = promisify(execFile);
const here = resolve(import.meta.dirname, '..');
const root = resolve(here, '../..');
const outDir = join(here, '.samples');

/** The Markdown files whose samples and links are checked (paths relative to the root). */
function markdownFiles(): string[] {
  const docs = readdirSync(join(root, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .map((f) => `docs/${f}`);
  const readmes = readdirSync(join(root, 'packages'))
    .map((p) => `packages/${p}/README.md`)
    .filter((f) => existsSync(join(root, f)));
  return ['README.md', ...docs, ...readmes];
}

function slug(file: string, line: number): string {
  return `${file.replace(/\.md$/, '').replace(/[^a-zA-Z0-9]+/g, '-')}-L${line}.ts`;
}

interface Written {
  sample: Sample;
  path: string;
  /** Lines before the sample's first line in the written file. */
  offset: number;
}

function writeSamples(samples: Sample[]): Written[] {
  rmSync(outDir, { recursive: true, force: true });
  mkdirSync(outDir, { recursive: true });
  writeFileSync(
    join(outDir, 'tsconfig.json'),
    `${JSON.stringify(
      {
        extends: '../../../tsconfig.base.json',
        compilerOptions: { noEmit: true, declaration: false, declarationMap: false },
        include: ['*.ts'],
      },
      null,
      2,
    )}\n`,
  );
  return samples.map((sample) => {
    const prelude = sample.prelude
      ? readFileSync(join(here, 'preludes', `${sample.prelude}.ts`), 'utf8').trimEnd()
      : '';
    const head = `// ${sample.file}:${sample.line}${sample.name ? ` (${sample.name})` : ''}\n${
      prelude ? `${prelude}\n` : ''
    }`;
    const path = join(outDir, slug(sample.file, sample.line));
    // `export {}`: a module even without imports (top-level await, no shared globals).
    writeFileSync(path, `${head}${sample.code}\nexport {};\n`);
    return { sample, path, offset: head.split('\n').length - 1 };
  });
}

describe('documentation', () => {
  const files = markdownFiles();
  const samples = files.flatMap((f) => extractSamples(readFileSync(join(root, f), 'utf8'), f));

  it('has the user docs, each with TypeScript samples where it shows code', () => {
    for (const doc of [
      'docs/README.md',
      'docs/getting-started.md',
      'docs/concepts.md',
      'docs/idempotency.md',
      'docs/crash-matrix.md',
      'docs/operations.md',
      'docs/adapters.md',
      'docs/upgrading.md',
    ]) {
      expect(files, doc).toContain(doc);
    }
    expect(samples.filter((s) => s.file.startsWith('docs/')).length).toBeGreaterThan(10);
    expect(samples.filter((s) => s.name === 'getting-started')).toHaveLength(1);
  });

  it('every relative link points to a file that exists', () => {
    const broken = files.flatMap((f) =>
      brokenLinks(readFileSync(join(root, f), 'utf8'), join(root, f)),
    );
    expect(broken.map((b) => `${relative(root, b.file)}:${b.line} → ${b.target}`)).toEqual([]);
  });

  it('"Not supported yet" in the README is still true: every path its items name is absent', () => {
    const readme = readFileSync(join(root, 'README.md'), 'utf8');
    const section = /^## Not supported yet\n([\s\S]*?)(?=^## )/m.exec(readme)?.[1] ?? '';
    const paths = [...section.matchAll(/<!-- absent: ([^>]*?) -->/g)].flatMap((m) =>
      (m[1] ?? '').trim().split(/\s+/),
    );
    expect(paths.length, 'the section and its <!-- absent: … --> markers').toBeGreaterThan(0);
    // A path that exists now: the feature landed, so its item must leave the section.
    expect(paths.filter((p) => existsSync(join(root, p)))).toEqual([]);
  });

  it('the package READMEs link as npm shows them: absolute URLs, into files that exist', () => {
    const manifest = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
    const repo = String(manifest.repository.url)
      .replace(/^git\+/, '')
      .replace(/\.git$/, '');
    const broken = files
      .filter((f) => f.startsWith('packages/'))
      .flatMap((f) => npmBrokenLinks(readFileSync(join(root, f), 'utf8'), f, repo, root));
    expect(broken.map((b) => `${b.file}:${b.line} → ${b.target}`)).toEqual([]);
  });

  it('every TypeScript sample compiles (strict, against the packages’ source)', async () => {
    const written = writeSamples(samples);
    const tsc = join(root, 'node_modules/typescript/bin/tsc');
    let output = '';
    try {
      await run(process.execPath, [tsc, '-p', join(outDir, 'tsconfig.json'), '--pretty', 'false'], {
        cwd: outDir,
        maxBuffer: 16 << 20,
      });
    } catch (e) {
      output = `${(e as { stdout?: string }).stdout ?? ''}${(e as { stderr?: string }).stderr ?? ''}`;
      if (!output) throw e;
    }
    // `x.ts(12,5): error TS2304: …` → `docs/concepts.md:40:5 TS2304 …`
    const byPath = new Map(written.map((w) => [w.path, w]));
    const errors = output
      .split('\n')
      .filter((l) => l.includes(': error TS'))
      .map((l) => {
        const m = /^(.*?)\((\d+),(\d+)\): error (TS\d+): (.*)$/.exec(l);
        const w = m ? byPath.get(resolve(outDir, m[1] ?? '')) : undefined;
        if (!m || !w) return l;
        const line = Number(m[2]) - w.offset;
        const where =
          line >= 1
            ? `${w.sample.file}:${w.sample.line + line - 1}:${m[3]}`
            : `${w.sample.file}:${w.sample.line} (prelude ${w.sample.prelude})`;
        return `${where} ${m[4]} ${m[5]}`;
      });
    expect(errors).toEqual([]);
  });

  it('every SQL block of docs/*.md runs on a migrated database', async () => {
    const blocks = files
      .filter((f) => f.startsWith('docs/'))
      .flatMap((f) => extractBlocks(readFileSync(join(root, f), 'utf8'), f, 'sql'));
    expect(blocks.length).toBeGreaterThan(5);
    const name = `cyclone_docs_${process.pid}_${Date.now().toString(36)}`;
    const admin = new pg.Client({ connectionString: ADMIN_URL });
    await admin.connect();
    await admin.query(`CREATE DATABASE ${name}`);
    const client = new Client({ connectionString: urlFor(name), poolSize: 1 });
    const failures: string[] = [];
    try {
      await migrateIdempotency(client);
      await migrateSendgrid(client);
      await migrateTwilio(client);
      for (const b of blocks) {
        const c = await client.pool.connect();
        try {
          await c.query('BEGIN');
          await c.query(b.code);
        } catch (e) {
          failures.push(`${b.file}:${b.line}: ${(e as Error).message}`);
        } finally {
          await c.query('ROLLBACK').catch(() => {});
          c.release();
        }
      }
    } finally {
      await client.close();
      await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`).finally(() => admin.end());
    }
    expect(failures).toEqual([]);
  });
});
