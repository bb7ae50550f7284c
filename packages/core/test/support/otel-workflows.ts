/**
 * The workflow of the cross-process trace test (observability.test.ts and otel-worker.ts):
 * a → b → c → d, where
 * - `a` hangs on its first attempt in a victim worker (which the test SIGKILLs), and returns on
 *   the next, in the other worker;
 * - `c` fails its first attempt (retryable) and returns on the second;
 * - `d` fails its first attempt for good (NonRetryableError: discarded, the run fails) and
 *   returns once an operator retries it.
 */
import { emitLine } from '@cyclone/testkit';
import { NonRetryableError, newAction, newWorkflow } from '../../src/index.js';

/** True in the victim worker: `a`'s first attempt hangs there. */
let victim = false;

export function configureTraceFlow(options: { victim: boolean }): void {
  victim = options.victim;
}

const hangFirst = newAction('otel_hang_first', async (ctx) => {
  if (victim && ctx.attempt === 1) {
    emitLine(`HANG ${ctx.runId}`);
    await new Promise(() => {});
  }
  return 'a';
});

const ok = newAction('otel_ok', async (ctx) => ctx.node);

const flaky = newAction(
  'otel_flaky',
  async (ctx) => {
    if (ctx.attempt === 1) throw new Error('flaky: the first attempt fails');
    return 'c';
  },
  { backoff: () => 10 },
);

const needsOperator = newAction('otel_needs_operator', async (ctx) => {
  if (ctx.attempt === 1) throw new NonRetryableError('declined: an operator must look');
  return 'd';
});

export const TraceFlow = newWorkflow<{ orderId: string }>('otel_trace', {
  nodes: {
    a: { action: hangFirst },
    b: { action: ok, after: ['a'] },
    c: { action: flaky, after: ['b'] },
    d: { action: needsOperator, after: ['c'] },
  },
});
