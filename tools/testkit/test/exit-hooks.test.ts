import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const MODULE = fileURLToPath(new URL('../src/exit-hooks.ts', import.meta.url));
const INDEX = fileURLToPath(new URL('../src/index.ts', import.meta.url));

/** Runs `script` (an ES module body) in a child Node process with tsx. */
function runChild(script: string) {
  const r = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
    encoding: 'utf8',
    timeout: 20_000,
  });
  return { stdout: r.stdout, stderr: r.stderr, status: r.status, signal: r.signal };
}

/**
 * A script that evaluates the module twice (as vitest's main process does once per project),
 * registers `n` hooks alternately through each, removes hook 5, makes hook 3 throw, then `end`s.
 */
const hooksScript = (n: number, end: string) => `
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
  ${end}
`;

/** Hooks 0 to n - 1 but 3 (threw) and 5 (removed), in order. */
const expectedHooks = (n: number) =>
  Array.from({ length: n }, (_, i) => i)
    .filter((i) => i !== 3 && i !== 5)
    .map((i) => `hook ${i}`);

describe('onProcessExit', () => {
  it('runs every hook at exit on one listener, across evaluations of the module', () => {
    const r = runChild(hooksScript(24, ''));
    expect(r.stderr).not.toContain('MaxListenersExceededWarning');
    expect(r.status).toBe(0);
    expect(r.stdout.trim().split('\n')).toEqual(expectedHooks(24));
  });

  it('runs them on SIGTERM (how vitest ends a test process), once, and the process still dies of it', () => {
    const r = runChild(
      hooksScript(12, `process.kill(process.pid, 'SIGTERM'); setTimeout(() => {}, 10_000);`),
    );
    expect(r.signal).toBe('SIGTERM');
    expect(r.stdout.trim().split('\n')).toEqual(expectedHooks(12));
  });

  it('leaves SIGTERM to a listener of the process when there is one', () => {
    const r = runChild(
      hooksScript(
        8,
        `process.on('SIGTERM', () => { process.stdout.write('own handler\\n'); process.exit(7); });
         process.kill(process.pid, 'SIGTERM'); setTimeout(() => {}, 10_000);`,
      ),
    );
    expect(r.status).toBe(7);
    // The hooks ran on the signal; 'exit' found none left to run again.
    expect(r.stdout.trim().split('\n')).toEqual([...expectedHooks(8), 'own handler']);
  });

  it('adds no listener to a process that only imports the testkit (a worker child)', () => {
    // Counted before and after the import: the loader has listeners of its own.
    const r = runChild(`
      const count = () => process.listenerCount('exit') + ' ' + process.listenerCount('SIGTERM');
      const before = count();
      await import(${JSON.stringify(INDEX)});
      process.stdout.write(before + ' / ' + count());
    `);
    expect(r.stderr).toBe('');
    const [before, after] = r.stdout.split(' / ');
    expect(after).toBe(before);
  });
});

describe('ExitTracked', () => {
  it('cleans up the resources still in it at exit, each in turn, past one that throws', () => {
    const r = runChild(`
      const { ExitTracked } = await import(${JSON.stringify(MODULE)});
      const open = new ExitTracked((x) => {
        if (x === 'b') throw new Error('b fails');
        process.stdout.write('closed ' + x + '\\n');
      });
      const before = process.listenerCount('exit');
      process.stdout.write('added ' + (process.listenerCount('exit') - before) + '\\n');
      for (const x of ['a', 'b', 'c', 'd']) open.add(x);
      open.delete('d');
      process.stdout.write('added ' + (process.listenerCount('exit') - before) + '\\n');
    `);
    expect(r.status).toBe(0);
    expect(r.stdout.trim().split('\n')).toEqual(['added 0', 'added 1', 'closed a', 'closed c']);
  });
});
