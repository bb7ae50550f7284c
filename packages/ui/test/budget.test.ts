/**
 * The bundle budget of the operator pages (built by `pnpm build` into dist/public): the JavaScript
 * a first page load fetches — the entry and every chunk it imports statically — stays within
 * 200 KB gzip, and the DAG's libraries (@xyflow/react, dagre) are only in a chunk loaded on demand.
 * Reads Vite's manifest; fails, saying so, when the pages are not built.
 */
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';
import { describe, expect, it } from 'vitest';

const PUBLIC = fileURLToPath(new URL('../dist/public/', import.meta.url));
const MANIFEST = `${PUBLIC}.vite/manifest.json`;
/** Initial JavaScript budget, gzip bytes (issue budget: 200 KB). */
const BUDGET = 200 * 1024;

interface Chunk {
  file: string;
  src?: string;
  isEntry?: boolean;
  isDynamicEntry?: boolean;
  imports?: string[];
  dynamicImports?: string[];
}

function manifest(): Record<string, Chunk> {
  if (!existsSync(MANIFEST)) {
    throw new Error(
      `${MANIFEST} is missing: run \`pnpm build\` (or pnpm --filter @cyclone/ui build)`,
    );
  }
  return JSON.parse(readFileSync(MANIFEST, 'utf8')) as Record<string, Chunk>;
}

/** The manifest keys a first load fetches: the entries and their static imports, transitively. */
function initialKeys(m: Record<string, Chunk>): Set<string> {
  const seen = new Set<string>();
  const visit = (key: string) => {
    if (seen.has(key)) return;
    seen.add(key);
    for (const dep of m[key]?.imports ?? []) visit(dep);
  };
  for (const [key, chunk] of Object.entries(m)) if (chunk.isEntry) visit(key);
  return seen;
}

const gzipBytes = (file: string) => gzipSync(readFileSync(`${PUBLIC}${file}`), { level: 9 }).length;

describe('bundle budget of the operator pages', () => {
  it('loads at most 200 KB of gzipped JavaScript first', () => {
    const m = manifest();
    const keys = initialKeys(m);
    expect(keys.size).toBeGreaterThan(0);
    const total = [...keys].reduce((n, k) => n + gzipBytes(m[k]?.file ?? ''), 0);
    console.log(`initial JS: ${(total / 1024).toFixed(1)} KB gzip over ${keys.size} chunk(s)`);
    expect(total).toBeLessThanOrEqual(BUDGET);
  });

  it('keeps the DAG code (@xyflow/react, dagre) in a lazy chunk', () => {
    const m = manifest();
    const initial = initialKeys(m);
    const dag = Object.entries(m).find(([, c]) => c.src === 'src/dag/Dag.tsx');
    expect(dag, 'the DAG module has its own chunk').toBeDefined();
    const [dagKey, dagChunk] = dag as [string, Chunk];
    expect(dagChunk.isDynamicEntry).toBe(true);
    expect(initial.has(dagKey)).toBe(false);
    // The libraries' own strings: in the lazy chunk, in no initial chunk.
    const markers = ['react-flow__renderer', 'network-simplex'];
    const dagText = readFileSync(`${PUBLIC}${dagChunk.file}`, 'utf8');
    for (const marker of markers) {
      expect(dagText, `${marker} in the DAG chunk`).toContain(marker);
      for (const key of initial) {
        const text = readFileSync(`${PUBLIC}${m[key]?.file}`, 'utf8');
        expect(text.includes(marker), `${marker} in initial chunk ${m[key]?.file}`).toBe(false);
      }
    }
  });
});
