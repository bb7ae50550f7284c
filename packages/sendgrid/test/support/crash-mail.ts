/**
 * The workflow of the SendGrid crash tests, shared by the test file (the in-process rescuer) and
 * the child worker (crash-mail-worker.ts). In the victim process, attempt 1 stops right after
 * the guarded send returned — the ledger says `succeeded`, the step is not completed — and
 * waits to be SIGKILLed.
 */
import { type Context, newAction, newWorkflow } from '@cyclone/core';
import type { MailService } from '@sendgrid/mail';
import { idempotentMail, type MailUnknownPolicy } from '../../src/index.js';

export interface CrashMailInput {
  to: string;
  onUnknown: Exclude<MailUnknownPolicy, (...args: never[]) => unknown>;
}

interface Config {
  mail: MailService;
  emit: (line: string) => void;
  victim: boolean;
}

let config: Config | undefined;

/** Sets this process's mail service, output and role; call before a worker starts. */
export function configureCrashMail(c: Config): void {
  config = c;
}

const send = newAction(
  'crash_mail_send',
  async (ctx: Context, input: CrashMailInput) => {
    if (!config) throw new Error('configureCrashMail() was not called');
    const c = config;
    c.emit(`SENDING ${ctx.runId} ${ctx.attempt}`);
    const sent = await idempotentMail(c.mail, ctx, {
      onUnknown: input.onUnknown,
      quietPeriodMs: 0,
    }).send({
      to: input.to,
      from: 'shop@example.com',
      subject: 'Your receipt',
      text: 'Thanks for your order.',
    });
    c.emit(`SENT ${ctx.runId} ${ctx.attempt} ${sent.messageId}`);
    if (c.victim && ctx.attempt === 1) return new Promise<never>(() => {});
    return sent;
  },
  { maxAttempts: 5, backoff: () => 50 },
);

export const CrashMailFlow = newWorkflow<CrashMailInput>('crash_mail', {
  nodes: { send: { action: send } },
});
