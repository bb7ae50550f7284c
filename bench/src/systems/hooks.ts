/**
 * What the child process does when a handler starts (count it, report a latency sample, hang
 * as the victim of a kill). Every system's handlers call `onJobStart(payload)` first; the child
 * installs the behaviour with `setJobStart` before it starts the worker.
 */

type JobStart = (payload: unknown) => void | Promise<void>;

let current: JobStart = () => {};

/** Installs the behaviour of `onJobStart` (child.ts). */
export function setJobStart(fn: JobStart): void {
  current = fn;
}

/** Called by every handler of every system before it does its work. */
export function onJobStart(payload: unknown): void | Promise<void> {
  return current(payload);
}
