/**
 * The "in progress" looks of a step that reconciles a lost call: each attempt that cannot yet
 * tell whether the provider performed it fails with `@cyclone/idempotency`'s retryable
 * `InProgressError` ("… may still be in progress … (N ms left)") and looks again after its
 * backoff. The adapters' tests of `assumeNotSentAfterMs` wait for such looks and check them.
 */
import type { Client, StepInfo } from '@cyclone/core';
import { waitFor } from '@cyclone/testkit';
import { expect } from 'vitest';
import { stepOf } from './harness.js';

/** One "in progress" error of a step, with the `ms left` its message names. */
export type InProgressLook = StepInfo['errors'][number] & { left: number };

/** The "in progress" errors of a step, in order, with their `ms left`. */
export function inProgressLooks(step: StepInfo): InProgressLook[] {
  return step.errors
    .filter((e) => /may still be in progress/.test(e.message))
    .map((e) => ({ ...e, left: Number(/\((\d+) ms left\)/.exec(e.message)?.[1]) }));
}

/**
 * Polls the step `node` (default `send`) of a running run until it has `looks` "in progress"
 * errors, or until it is settled (completed, discarded, cancelled); resolves with the step.
 * @throws after 10 s.
 */
export function waitForLooks(
  client: Client,
  runId: string,
  looks: number,
  node = 'send',
): Promise<StepInfo> {
  return waitFor(
    `${looks} "in progress" looks (or a settled step)`,
    async () => {
      const s = await stepOf(client, runId, node);
      const settled = s.state === 'completed' || s.state === 'discarded' || s.state === 'cancelled';
      return inProgressLooks(s).length >= looks || settled ? s : undefined;
    },
    { timeoutMs: 10_000 },
  );
}

/**
 * Asserts that a step kept looking: its first error matches `first` (the lost call), and every
 * later one — at least one — is a retryable "in progress" look whose `ms left` is above
 * `leftAbove` and at most `leftAtMost`.
 */
export function expectKeptLooking(
  step: StepInfo,
  o: { first: RegExp; leftAbove: number; leftAtMost: number },
): void {
  const [first, ...looks] = step.errors;
  expect(first?.message).toMatch(o.first);
  expect(looks.length).toBeGreaterThanOrEqual(1);
  expect(looks.map((e) => e.kind)).toEqual(looks.map(() => 'error')); // never non_retryable
  expect(inProgressLooks(step)).toHaveLength(looks.length);
  for (const e of inProgressLooks(step)) {
    expect(e.left).toBeGreaterThan(o.leftAbove);
    expect(e.left).toBeLessThanOrEqual(o.leftAtMost);
  }
}
