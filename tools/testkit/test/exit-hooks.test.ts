import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const MODULE = fileURLToPath(new URL('../src/exit-hooks.ts', import.meta.url));

/**
 * A child process that evaluates the module twice (as a test process does once per test file),
 * registers `n` hooks alternately through each, removes one, makes one throw, then exits.
 */
function runChild(n: number): { stdout: string; stderr: string; status: number | null } {
  const script = `
    const a = await import(${JSON.stringify(`${MODULE}?a`)});
    const b = await import(${JSON.stringify(`${MODULE}?b`)});
    if (a === b) throw new Error('the module was not evaluated twice');
    for (let i = 0; i < ${n}; i++) {
      const m = i % 2 ? b : a;
      const remove = m.onProcessExit(() => {
        if (i === 3) throw new Error('hook 3 throws');
        process.stdout.write('hook ' + i + '\\n');
      });
      if (i === 5) remove();
    }
  `;
  const r = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
    encoding: 'utf8',
    timeout: 20_000,
  });
  return { stdout: r.stdout, stderr: r.stderr, status: r.status };
}

describe('onProcessExit', () => {
  it('runs every hook at exit on one listener, across evaluations of the module', () => {
    const n = 24;
    const r = runChild(n);
    expect(r.stderr).not.toContain('MaxListenersExceededWarning');
    expect(r.status).toBe(0);
    const ran = r.stdout.trim().split('\n');
    // Hook 3 threw and hook 5 was removed; every other hook ran once, in registration order.
    const expected = Array.from({ length: n }, (_, i) => i)
      .filter((i) => i !== 3 && i !== 5)
      .map((i) => `hook ${i}`);
    expect(ran).toEqual(expected);
  });
});
