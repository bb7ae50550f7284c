/**
 * The testkit's last-resort cleanups when a test process ends without running its hooks
 * (children SIGKILLed, throwaway servers and network namespaces removed), all on one process
 * `exit` listener and one `SIGTERM` listener:
 * - vitest's main process evaluates the testkit once per project's global setup, so a listener
 *   of each module's own passed Node's limit of 10 (MaxListenersExceededWarning); the hooks live
 *   on `globalThis`, which those evaluations share;
 * - vitest ends a test file's process with SIGTERM, which emits no `exit`, so the hooks run on it
 *   too, then the process dies of the signal as before unless another listener handles it.
 * A process registers them only once it owns something to clean up (`ExitTracked`), so the
 * worker children that import the testkit keep the default SIGTERM.
 */

const KEY = Symbol.for('cyclone.testkit.exitHooks');

type Hooks = Set<() => void>;

/**
 * Runs `fn` when the process exits or gets SIGTERM (synchronously, as Node's `exit` event
 * requires), once; a hook that throws does not stop the others.
 * @returns a function that removes the hook (for a resource closed before the exit).
 */
export function onProcessExit(fn: () => void): () => void {
  const g = globalThis as { [KEY]?: Hooks };
  let hooks = g[KEY];
  if (hooks === undefined) {
    const created: Hooks = new Set();
    g[KEY] = created;
    const runAll = () => {
      for (const hook of created) {
        try {
          hook();
        } catch {
          // the next hook's cleanup still runs
        }
      }
      created.clear();
    };
    process.once('exit', runAll);
    process.once('SIGTERM', () => {
      runAll();
      // Without a listener left the signal's default action applies again: die of it.
      if (process.listenerCount('SIGTERM') === 0) process.kill(process.pid, 'SIGTERM');
    });
    hooks = created;
  }
  hooks.add(fn);
  const own = hooks;
  return () => {
    own.delete(fn);
  };
}

/**
 * A set of live resources that `cleanup` is called on, each in turn, if the process ends while
 * they are in it (`onProcessExit`), registered when the first one is added.
 */
export class ExitTracked<T> extends Set<T> {
  private hooked = false;

  /** @param cleanup synchronous; one that throws does not stop the others. */
  constructor(private readonly cleanup: (item: T) => void) {
    super();
  }

  override add(item: T): this {
    if (!this.hooked) {
      this.hooked = true;
      onProcessExit(() => {
        for (const x of this) {
          try {
            this.cleanup(x);
          } catch {
            // the next resource's cleanup still runs
          }
        }
      });
    }
    return super.add(item);
  }
}
