/**
 * The workflow of the Twilio crash tests, shared by the test file (the in-process rescuer) and
 * the child worker (crash-sms-worker.ts). In the victim process, attempt 1 stops right after
 * the guarded create returned — the ledger says `succeeded`, the step is not completed — and
 * waits to be SIGKILLed.
 */
import { type Context, newAction, newWorkflow } from '@cyclone/core';
import {
  idempotentTwilio,
  type SmsUnknownPolicy,
  type TwilioMessagingClient,
} from '../../src/index.js';

export interface CrashSmsInput {
  to: string;
  onUnknown: Exclude<SmsUnknownPolicy, (...args: never[]) => unknown>;
}

interface Config {
  twilio: TwilioMessagingClient;
  emit: (line: string) => void;
  victim: boolean;
}

let config: Config | undefined;

/** Sets this process's Twilio client, output and role; call before a worker starts. */
export function configureCrashSms(c: Config): void {
  config = c;
}

const send = newAction(
  'crash_sms_send',
  async (ctx: Context, input: CrashSmsInput) => {
    if (!config) throw new Error('configureCrashSms() was not called');
    const c = config;
    c.emit(`SENDING ${ctx.runId} ${ctx.attempt}`);
    const sms = await idempotentTwilio(c.twilio, ctx, {
      onUnknown: input.onUnknown,
      quietPeriodMs: 0,
    }).messages.create({ to: input.to, from: '+15005550006', body: 'Your code is 123456' });
    c.emit(`SENT ${ctx.runId} ${ctx.attempt} ${sms.sid}`);
    if (c.victim && ctx.attempt === 1) return new Promise<never>(() => {});
    return sms;
  },
  { maxAttempts: 5, backoff: () => 50 },
);

export const CrashSmsFlow = newWorkflow<CrashSmsInput>('crash_sms', {
  nodes: { send: { action: send } },
});
