/**
 * The testkit's last-resort cleanups when a test process exits without running its hooks
 * (children SIGKILLed, throwaway servers and network namespaces removed), all on one process
 * `exit` listener. A test process evaluates the testkit's modules again for every test file, so a
 * listener of each module's own added one per module and file and passed Node's limit of 10
 * (MaxListenersExceededWarning); the hooks live on `globalThis`, which the evaluations share.
 */

const KEY = Symbol.for('cyclone.testkit.exitHooks');

type Hooks = Set<() => void>;

/**
 * Runs `fn` when the process exits (synchronously, as Node's `exit` event requires); a hook that
 * throws does not stop the others.
 * @returns a function that removes the hook (for a resource closed before the exit).
 */
export function onProcessExit(fn: () => void): () => void {
  const g = globalThis as { [KEY]?: Hooks };
  let hooks = g[KEY];
  if (hooks === undefined) {
    const created: Hooks = new Set();
    g[KEY] = created;
    process.once('exit', () => {
      for (const hook of created) {
        try {
          hook();
        } catch {
          // the next hook's cleanup still runs
        }
      }
    });
    hooks = created;
  }
  hooks.add(fn);
  const own = hooks;
  return () => {
    own.delete(fn);
  };
}
