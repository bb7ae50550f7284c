/**
 * Relative links of a Markdown file that point nowhere: `[text](path)` and `[text](path#anchor)`
 * whose path, resolved from the file's folder, does not exist. External links (`https:`,
 * `mailto:`) and in-page anchors (`#…`) are not checked; links inside code are ignored.
 */
import { existsSync } from 'node:fs';
import { dirname, resolve } from 'node:path';

export interface BrokenLink {
  file: string;
  line: number;
  target: string;
}

const LINK = /\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g;

/** The broken relative links of `markdown`, the content of the file at `path`. */
export function brokenLinks(markdown: string, path: string): BrokenLink[] {
  const broken: BrokenLink[] = [];
  let inFence = false;
  markdown.split('\n').forEach((text, i) => {
    if (/^\s*(`{3,}|~{3,})/.test(text)) inFence = !inFence;
    if (inFence) return;
    const prose = text.replace(/`[^`]*`/g, '');
    for (const m of prose.matchAll(LINK)) {
      const target = m[1] ?? '';
      if (/^[a-z][a-z0-9+.-]*:/i.test(target) || target.startsWith('#')) continue;
      const file = decodeURIComponent(target.split('#')[0] ?? '');
      if (!existsSync(resolve(dirname(path), file)))
        broken.push({ file: path, line: i + 1, target });
    }
  });
  return broken;
}

/**
 * The links of a package README that would not work on npm, which shows the README without the
 * repository around it: every relative link (npm resolves none to this repository's files), and
 * every link into the repository `repo` (`<repo>/blob/<branch>/<path>`, or `/tree/`) whose path
 * does not exist under `root`. In-page anchors are fine.
 */
export function npmBrokenLinks(
  markdown: string,
  path: string,
  repo: string,
  root: string,
): BrokenLink[] {
  const broken: BrokenLink[] = [];
  const inRepo = new RegExp(
    `^${repo.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')}/(?:blob|tree)/[^/]+/([^#?]*)`,
  );
  let inFence = false;
  markdown.split('\n').forEach((text, i) => {
    if (/^\s*(`{3,}|~{3,})/.test(text)) inFence = !inFence;
    if (inFence) return;
    const prose = text.replace(/`[^`]*`/g, '');
    for (const m of prose.matchAll(LINK)) {
      const target = m[1] ?? '';
      if (target.startsWith('#')) continue;
      if (!/^[a-z][a-z0-9+.-]*:/i.test(target)) {
        broken.push({ file: path, line: i + 1, target });
        continue;
      }
      const file = inRepo.exec(target)?.[1];
      if (file !== undefined && !existsSync(resolve(root, decodeURIComponent(file))))
        broken.push({ file: path, line: i + 1, target });
    }
  });
  return broken;
}
