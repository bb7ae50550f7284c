/**
 * src/shared/api.ts is imported by the pages' bundle as well as the server, so it may take types
 * from elsewhere (core's run and step states) but nothing that exists at run time: every import
 * and re-export in it is type-only, which the TypeScript compiler erases.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

const API = fileURLToPath(new URL('../src/shared/api.ts', import.meta.url));

/** The module's imports and `export … from`, each with whether it is type-only. */
function dependencies(text: string): { from: string; typeOnly: boolean }[] {
  const sf = ts.createSourceFile('api.ts', text, ts.ScriptTarget.ES2022, true, ts.ScriptKind.TS);
  const out: { from: string; typeOnly: boolean }[] = [];
  for (const s of sf.statements) {
    if (ts.isImportDeclaration(s) && ts.isStringLiteral(s.moduleSpecifier)) {
      const c = s.importClause;
      const named = c?.namedBindings;
      const allNamedTypes =
        named !== undefined &&
        ts.isNamedImports(named) &&
        named.elements.every((e) => e.isTypeOnly) &&
        c?.name === undefined;
      out.push({ from: s.moduleSpecifier.text, typeOnly: c?.isTypeOnly === true || allNamedTypes });
    }
    if (ts.isExportDeclaration(s) && s.moduleSpecifier && ts.isStringLiteral(s.moduleSpecifier)) {
      out.push({ from: s.moduleSpecifier.text, typeOnly: s.isTypeOnly });
    }
  }
  return out;
}

describe('the shared API module', () => {
  it('has no run-time dependency: every import is type-only', () => {
    const deps = dependencies(readFileSync(API, 'utf8'));
    expect(deps.filter((d) => !d.typeOnly)).toEqual([]);
    // It does take core's states as types (a scan that found nothing would pass by accident).
    expect(deps).toContainEqual({ from: '@cyclone/core', typeOnly: true });
  });

  it('the check catches a value import', () => {
    expect(dependencies("import { Client } from '@cyclone/core';")).toEqual([
      { from: '@cyclone/core', typeOnly: false },
    ]);
    expect(dependencies("export { RUN_STATES } from './x.js';")).toEqual([
      { from: './x.js', typeOnly: false },
    ]);
  });
});
