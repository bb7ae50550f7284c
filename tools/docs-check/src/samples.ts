/**
 * The TypeScript samples of a Markdown file: every fenced block whose info string is `ts` or
 * `typescript`. A sample is a module of its own, compiled as written, unless the line right
 * before its fence is a sample directive, an HTML comment (invisible on GitHub and npm):
 *
 *   <!-- sample: prelude=handler -->     prepend tools/docs-check/preludes/handler.ts, which
 *                                        declares what the fragment uses but does not define
 *                                        (`ctx`, `client`, `stripeClient`…)
 *   <!-- sample: name=getting-started --> name the sample, so a test can find it (the consumer
 *                                        test runs the getting-started program)
 *   <!-- sample: prelude=client name=x -->  both
 *
 * Blocks in other languages (`sh`, `sql`, plain ``` text) are not compiled.
 */

/** One TypeScript block of a Markdown file. */
export interface Sample {
  /** The Markdown file, as given. */
  file: string;
  /** 1-based line of the first code line (the one after the opening fence). */
  line: number;
  /** The code, without the fences. */
  code: string;
  /** The prelude to prepend, from `<!-- sample: prelude=NAME -->`. */
  prelude?: string;
  /** The name from `<!-- sample: name=NAME -->`. */
  name?: string;
}

const FENCE = /^(\s*)(`{3,}|~{3,})\s*([\w-]*)/;
const DIRECTIVE = /^ {0,3}<!--\s*sample:\s*(.*?)\s*-->\s*$/;
const TS = new Set(['ts', 'typescript']);

/**
 * Extracts the TypeScript samples of `markdown`.
 * @throws Error on an unknown directive key, or a directive that is not followed by a ts fence.
 */
export function extractSamples(markdown: string, file: string): Sample[] {
  const lines = markdown.split('\n');
  const samples: Sample[] = [];
  for (let i = 0; i < lines.length; i++) {
    const open = FENCE.exec(lines[i] ?? '');
    if (!open) {
      const d = DIRECTIVE.exec(lines[i] ?? '');
      if (d && !TS.has(FENCE.exec(lines[i + 1] ?? '')?.[3] ?? '')) {
        throw new Error(`${file}:${i + 1}: a sample directive must be right before a ts fence`);
      }
      continue;
    }
    const [, indent = '', fence = '', lang = ''] = open;
    let end = i + 1;
    while (end < lines.length && !(lines[end] ?? '').trim().startsWith(fence)) end++;
    if (TS.has(lang)) {
      const body = lines
        .slice(i + 1, end)
        .map((l) => (l.startsWith(indent) ? l.slice(indent.length) : l))
        .join('\n');
      const sample: Sample = { file, line: i + 2, code: body };
      const directive = DIRECTIVE.exec(lines[i - 1] ?? '');
      if (directive) Object.assign(sample, parseDirective(directive[1] ?? '', `${file}:${i}`));
      samples.push(sample);
    }
    i = end;
  }
  return samples;
}

function parseDirective(text: string, where: string): Pick<Sample, 'prelude' | 'name'> {
  const out: Pick<Sample, 'prelude' | 'name'> = {};
  for (const part of text.split(/\s+/).filter(Boolean)) {
    const [key, value] = part.split('=', 2);
    if (!value) throw new Error(`${where}: sample directive "${part}" is not key=value`);
    if (key === 'prelude') out.prelude = value;
    else if (key === 'name') out.name = value;
    else throw new Error(`${where}: unknown sample directive key "${key}"`);
  }
  return out;
}

/** A fenced block of another language (`sql`…), with the 1-based line of its first code line. */
export interface Block {
  file: string;
  line: number;
  code: string;
}

/** The fenced blocks of `markdown` whose info string is `lang`. */
export function extractBlocks(markdown: string, file: string, lang: string): Block[] {
  const lines = markdown.split('\n');
  const blocks: Block[] = [];
  for (let i = 0; i < lines.length; i++) {
    const open = FENCE.exec(lines[i] ?? '');
    if (!open) continue;
    const [, indent = '', fence = '', info = ''] = open;
    let end = i + 1;
    while (end < lines.length && !(lines[end] ?? '').trim().startsWith(fence)) end++;
    if (info === lang) {
      const code = lines
        .slice(i + 1, end)
        .map((l) => (l.startsWith(indent) ? l.slice(indent.length) : l))
        .join('\n');
      blocks.push({ file, line: i + 2, code });
    }
    i = end;
  }
  return blocks;
}
