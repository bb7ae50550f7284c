/**
 * PostgreSQL array literals (`{a,b}`) built as text in one pass, for the batch statements'
 * array parameters. pg serializes a JavaScript array element by element (`prepareValue`, then
 * two regular-expression replacements per element); for the completion batch of a busy no-op
 * worker that was about 7 % of the worker's CPU (bench/README.md § Per-step budget). The server
 * receives the same array either way.
 */

/** Characters that must be escaped inside a double-quoted array element. */
const NEEDS_ESCAPE = /[\\"]/;
const ESCAPED = /[\\"]/g;

/**
 * One element, double-quoted, with `\` and `"` escaped (PostgreSQL's array input syntax:
 * https://www.postgresql.org/docs/15/arrays.html#ARRAYS-IO). Any text is safe in it.
 */
export function arrayElement(text: string): string {
  return `"${NEEDS_ESCAPE.test(text) ? text.replace(ESCAPED, '\\$&') : text}"`;
}

/** The columns of a completion batch as four array literals, in one pass over the steps. */
export interface CompletionArrays {
  /** uuid[]: the run ids (canonical uuid text, no quoting needed). */
  runIds: string;
  /** text[]: the node names, quoted. */
  nodes: string;
  /** int[]: the attempts. */
  attempts: string;
  /** jsonb[]: the outputs (JSON text), quoted. */
  outputs: string;
}

/**
 * The array literals of a batch of completions.
 * @throws TypeError when a run id is not a uuid's text or an attempt not an integer (they come
 *   from the claim's rows, so this is a bug, not data: refused rather than sent unquoted).
 */
export function completionArrays(
  steps: readonly { runId: string; node: string; attempt: number; output: string }[],
): CompletionArrays {
  let runIds = '{';
  let nodes = '{';
  let attempts = '{';
  let outputs = '{';
  for (let i = 0; i < steps.length; i++) {
    const p = steps[i] as (typeof steps)[number];
    if (i > 0) {
      runIds += ',';
      nodes += ',';
      attempts += ',';
      outputs += ',';
    }
    if (!UUID.test(p.runId)) throw new TypeError(`not a uuid: ${JSON.stringify(p.runId)}`);
    if (!Number.isInteger(p.attempt)) throw new TypeError(`not an integer: ${p.attempt}`);
    runIds += p.runId;
    nodes += arrayElement(p.node);
    attempts += p.attempt;
    outputs += arrayElement(p.output);
  }
  return {
    runIds: `${runIds}}`,
    nodes: `${nodes}}`,
    attempts: `${attempts}}`,
    outputs: `${outputs}}`,
  };
}

const UUID = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;
