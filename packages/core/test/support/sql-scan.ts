/**
 * A static check that SQL is never built from data: it parses TypeScript sources with the
 * compiler API and inspects every template literal that is SQL (uppercase SQL keywords in its
 * static text, or the text of a `.query(…)` call) and every `+` that joins SQL text.
 *
 * An interpolation `${…}` in SQL is allowed only when it is:
 * - the quoted schema: `q` or `x.q` (a `q` variable must be initialised from `quoteSchema(…)` or
 *   another `.q`, and a `.q` property may only be assigned those), or `s` in a `sql.ts` module,
 *   whose builders all take the quoted schema as `s` (their callers are checked: the first
 *   argument of every `sql.<builder>(…)` call must be a quoted schema);
 * - an upper-case constant of the same file initialised with a string literal (a table name);
 * - a parameter placeholder's number: `$${i + 1}` (digits and arithmetic only);
 * - a call to a SQL helper of the same file whose arguments are all quoted schemas or `'$n'`
 *   placeholder literals, and, inside that helper, its parameters so fed;
 * - a call to one of core's step-fence fragments (`stepHeldSql`, …) given the quoted schema, then
 *   only '$n' placeholders or column names as string literals;
 * - or an entry of the reviewed list (`REVIEWED`), each with its reason.
 * Anything else is reported with its file, line and text.
 */
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import ts from 'typescript';

/** An interpolation found in SQL that no rule allows. */
export interface SqlFinding {
  file: string;
  line: number;
  expression: string;
  why: string;
}

export interface ScanResult {
  /** SQL templates inspected. */
  sqlTemplates: number;
  /** Interpolations inspected, by the rule that allowed them. */
  allowed: Record<string, number>;
  findings: SqlFinding[];
}

/** Interpolations reviewed by hand: `file` (suffix) and exact expression text, with the reason. */
export interface Reviewed {
  file: string;
  expression: string;
  reason: string;
}

/** Uppercase SQL keywords: prose and log messages in this code base are lower case. */
const SQL_WORDS =
  /\b(SELECT|INSERT\s+INTO|UPDATE|DELETE\s+FROM|CREATE|ALTER|DROP|TRUNCATE|LISTEN|NOTIFY|RETURNING|ON\s+CONFLICT|WHERE|VALUES|JOIN|GRANT)\b/;

function isQuotedSchema(e: ts.Expression, fileName: string): boolean {
  if (ts.isIdentifier(e)) return e.text === 'q' || (e.text === 's' && SQL_MODULE.test(fileName));
  return ts.isPropertyAccessExpression(e) && e.name.text === 'q';
}

/** A module of SQL builders: a `sql.ts`, or a module under a `sql/` folder. */
const SQL_MODULE = /(^|\/)sql(\.ts|\/[^/]+\.ts)$/;

const PLACEHOLDER_LITERAL = /^\$\d+$/;

function isPlaceholderLiteral(e: ts.Expression): boolean {
  return (
    (ts.isStringLiteral(e) || ts.isNoSubstitutionTemplateLiteral(e)) &&
    PLACEHOLDER_LITERAL.test(e.text)
  );
}

/** Core's step-fence fragments (`sql/fence.ts`), which sibling packages embed in their SQL. */
const FENCE_FRAGMENTS = new Set([
  'stepHeldSql',
  'stepRunningSql',
  'stepReopenedBetweenSql',
  'joinRunSql',
]);

/** A string literal naming a column or alias (`l.run_id`, `r`): SQL written in the source. */
const COLUMN_LITERAL = /^[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)?$/;

/** The name of a function-like declaration (`function f`, `const f = (…) =>`), if any. */
function functionName(fn: ts.Node): string | undefined {
  if (ts.isFunctionDeclaration(fn) && fn.name) return fn.name.text;
  if (
    (ts.isArrowFunction(fn) || ts.isFunctionExpression(fn)) &&
    ts.isVariableDeclaration(fn.parent)
  ) {
    return ts.isIdentifier(fn.parent.name) ? fn.parent.name.text : undefined;
  }
  return undefined;
}

function enclosingFunction(n: ts.Node): ts.SignatureDeclaration | undefined {
  for (let p = n.parent; p; p = p.parent) {
    if (
      ts.isFunctionDeclaration(p) ||
      ts.isArrowFunction(p) ||
      ts.isFunctionExpression(p) ||
      ts.isMethodDeclaration(p)
    ) {
      return p;
    }
  }
  return undefined;
}

/** Scans one source file. */
export function scanSource(
  fileName: string,
  text: string,
  reviewed: readonly Reviewed[] = [],
): ScanResult {
  const sf = ts.createSourceFile(fileName, text, ts.ScriptTarget.ES2022, true, ts.ScriptKind.TS);
  const result: ScanResult = { sqlTemplates: 0, allowed: {}, findings: [] };
  const allow = (rule: string) => {
    result.allowed[rule] = (result.allowed[rule] ?? 0) + 1;
  };
  const lineOf = (n: ts.Node) => sf.getLineAndCharacterOfPosition(n.getStart(sf)).line + 1;
  const find = (n: ts.Node, why: string) =>
    result.findings.push({ file: fileName, line: lineOf(n), expression: n.getText(sf), why });

  // Per file: string constants, local functions and every call to them.
  const constants = new Set<string>();
  /** `q` variables not from quoteSchema: reported only if the file puts a `q` into SQL. */
  const badQ: ts.Node[] = [];
  let qInSql = false;
  const functions = new Map<string, ts.SignatureDeclaration>();
  const calls = new Map<string, ts.CallExpression[]>();
  const visitDecls = (n: ts.Node) => {
    if (ts.isVariableDeclaration(n) && ts.isIdentifier(n.name) && n.initializer) {
      const init = n.initializer;
      if (
        /^[A-Z][A-Z0-9_]*$/.test(n.name.text) &&
        (ts.isStringLiteral(init) || ts.isNoSubstitutionTemplateLiteral(init))
      ) {
        constants.add(n.name.text);
      }
      // Provenance of `q`: quoteSchema(…) or another quoted schema.
      if (n.name.text === 'q') {
        const ok =
          (ts.isCallExpression(init) &&
            ts.isIdentifier(init.expression) &&
            init.expression.text === 'quoteSchema') ||
          (ts.isPropertyAccessExpression(init) && init.name.text === 'q');
        if (!ok) badQ.push(n);
      }
    }
    if (
      ts.isBinaryExpression(n) &&
      n.operatorToken.kind === ts.SyntaxKind.EqualsToken &&
      ts.isPropertyAccessExpression(n.left) &&
      n.left.name.text === 'q'
    ) {
      const r = n.right;
      const ok =
        (ts.isCallExpression(r) &&
          ts.isIdentifier(r.expression) &&
          r.expression.text === 'quoteSchema') ||
        (ts.isPropertyAccessExpression(r) && r.name.text === 'q');
      if (!ok) find(n, 'a `.q` property must be assigned quoteSchema(…) or another `.q`');
    }
    if (ts.isFunctionDeclaration(n) || ts.isArrowFunction(n) || ts.isFunctionExpression(n)) {
      const name = functionName(n);
      if (name) functions.set(name, n);
    }
    if (ts.isCallExpression(n) && ts.isIdentifier(n.expression)) {
      const list = calls.get(n.expression.text) ?? [];
      list.push(n);
      calls.set(n.expression.text, list);
    }
    ts.forEachChild(n, visitDecls);
  };
  visitDecls(sf);

  /** A parameter of local function `fn` fed only quoted schemas or '$n' literals by every call. */
  const isFedParameter = (id: ts.Identifier): boolean => {
    const fn = enclosingFunction(id);
    if (!fn) return false;
    const name = functionName(fn);
    if (!name) return false;
    const index = fn.parameters.findIndex(
      (p) => ts.isIdentifier(p.name) && p.name.text === id.text,
    );
    if (index < 0) return false;
    const sites = calls.get(name) ?? [];
    return (
      sites.length > 0 &&
      sites.every((c) => {
        const a = c.arguments[index];
        return a !== undefined && (isPlaceholderLiteral(a) || isQuotedSchema(a, fileName));
      })
    );
  };

  const checkInterpolation = (e: ts.Expression, literalBefore: string) => {
    const textOf = e.getText(sf);
    const r = reviewed.find((x) => fileName.endsWith(x.file) && x.expression === textOf);
    if (r) return allow('reviewed');
    if (isQuotedSchema(e, fileName)) {
      if (ts.isIdentifier(e) && e.text === 'q') qInSql = true;
      return allow('quoted schema');
    }
    if (ts.isIdentifier(e) && constants.has(e.text)) return allow('string constant');
    if (literalBefore.endsWith('$') && /^[\w\s.+\-*()]+$/.test(textOf))
      return allow('placeholder number');
    if (
      ts.isCallExpression(e) &&
      ts.isIdentifier(e.expression) &&
      functions.has(e.expression.text) &&
      e.arguments.every((a) => isPlaceholderLiteral(a) || isQuotedSchema(a, fileName))
    ) {
      return allow('sql helper call');
    }
    if (
      ts.isCallExpression(e) &&
      ts.isIdentifier(e.expression) &&
      FENCE_FRAGMENTS.has(e.expression.text) &&
      e.arguments[0] !== undefined &&
      isQuotedSchema(e.arguments[0], fileName) &&
      e.arguments
        .slice(1)
        .every(
          (a) =>
            isPlaceholderLiteral(a) ||
            ((ts.isStringLiteral(a) || ts.isNoSubstitutionTemplateLiteral(a)) &&
              COLUMN_LITERAL.test(a.text)),
        )
    ) {
      return allow('fence fragment call');
    }
    if (ts.isIdentifier(e) && isFedParameter(e)) return allow('sql helper parameter');
    find(e, 'interpolated into SQL: not a quoted schema, a string constant or a placeholder');
  };

  const isQueryArgument = (n: ts.Node) =>
    ts.isCallExpression(n.parent) &&
    n.parent.arguments[0] === n &&
    ts.isPropertyAccessExpression(n.parent.expression) &&
    n.parent.expression.name.text === 'query';

  const visit = (n: ts.Node) => {
    if (ts.isTemplateExpression(n)) {
      const staticText = n.head.text + n.templateSpans.map((s) => s.literal.text).join(' ');
      if (SQL_WORDS.test(staticText) || isQueryArgument(n)) {
        result.sqlTemplates++;
        let before = n.head.text;
        for (const span of n.templateSpans) {
          checkInterpolation(span.expression, before);
          before = span.literal.text;
        }
      }
    }
    if (ts.isBinaryExpression(n) && n.operatorToken.kind === ts.SyntaxKind.PlusToken) {
      for (const side of [n.left, n.right]) {
        if (
          (ts.isStringLiteral(side) ||
            ts.isNoSubstitutionTemplateLiteral(side) ||
            ts.isTemplateExpression(side)) &&
          SQL_WORDS.test(side.getText(sf))
        ) {
          find(n, 'SQL joined with +');
        }
      }
    }
    // Every `sql.<builder>(…)` gets the quoted schema first.
    if (
      ts.isCallExpression(n) &&
      ts.isPropertyAccessExpression(n.expression) &&
      ts.isIdentifier(n.expression.expression) &&
      n.expression.expression.text === 'sql'
    ) {
      const first = n.arguments[0];
      const r = reviewed.find((x) => fileName.endsWith(x.file) && x.expression === n.getText(sf));
      // `sql.prepared(sql.<builder>(q), …)`: the statement text of a builder, itself checked.
      const ofBuilder =
        n.expression.name.text === 'prepared' &&
        first !== undefined &&
        ts.isCallExpression(first) &&
        ts.isPropertyAccessExpression(first.expression) &&
        ts.isIdentifier(first.expression.expression) &&
        first.expression.expression.text === 'sql';
      if (r) allow('reviewed');
      else if (ofBuilder) allow('prepared builder call');
      else if (!first || !isQuotedSchema(first, 'caller')) {
        find(n, 'a sql.ts builder must be given the quoted schema (`q` or `x.q`) first');
      } else allow('sql builder call');
    }
    ts.forEachChild(n, visit);
  };
  visit(sf);
  if (qInSql)
    for (const n of badQ) find(n, '`q` must be initialised from quoteSchema(…) or another `.q`');
  return result;
}

/** Every `.ts` file under `dir` (recursively), generated files left out. */
export function sourceFiles(dir: string): string[] {
  const out: string[] = [];
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) out.push(...sourceFiles(p));
    else if (
      e.name.endsWith('.ts') &&
      !e.name.endsWith('.generated.ts') &&
      !e.name.endsWith('.d.ts')
    )
      out.push(p);
  }
  return out.sort();
}
