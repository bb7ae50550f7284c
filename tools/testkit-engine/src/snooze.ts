/**
 * Steps that wait without failing: a snooze (`SnoozeError`) gives back the attempt its claim
 * counted and writes no error entry. The adapters' tests of quiet periods, reconcile looks
 * (`assumeNotSentAfterMs`) and rate-limit answers wait for snoozes and check that no attempt
 * was used.
 */
import type { Client, StepInfo } from '@cyclone/core';
import { waitFor } from '@cyclone/testkit';
import { expect } from 'vitest';
import { stepOf } from './harness.js';

/**
 * Polls the step `node` (default `send`) of a run until it has snoozed `snoozes` times, or until
 * it is settled (completed, discarded, cancelled); resolves with the step.
 * @throws after `timeoutMs` (default 10 s).
 */
export function waitForSnoozes(
  client: Client,
  runId: string,
  snoozes: number,
  node = 'send',
  timeoutMs = 10_000,
): Promise<StepInfo> {
  return waitFor(
    `${snoozes} snoozes (or a settled step)`,
    async () => {
      const s = await stepOf(client, runId, node);
      const settled = s.state === 'completed' || s.state === 'discarded' || s.state === 'cancelled';
      return s.snoozes >= snoozes || settled ? s : undefined;
    },
    { timeoutMs },
  );
}

/**
 * Asserts that a step's snoozes used no attempt: it snoozed at least `minSnoozes` times (default
 * 1), its attempts used (claims minus snoozes) are `used`, its `maxAttempts` is the action's
 * (`maxAttempts`) plus one per snooze, and its errors are exactly `errors` (default none), so no
 * snooze left an entry.
 */
export function expectNoAttemptUsed(
  step: StepInfo,
  o: { maxAttempts: number; used: number; minSnoozes?: number; errors?: RegExp[] },
): void {
  expect(step.snoozes).toBeGreaterThanOrEqual(o.minSnoozes ?? 1);
  expect(step.attempt - step.snoozes).toBe(o.used);
  expect(step.maxAttempts).toBe(o.maxAttempts + step.snoozes);
  expect(step.errors.map((e) => e.message)).toEqual(
    (o.errors ?? []).map((m) => expect.stringMatching(m)),
  );
}
