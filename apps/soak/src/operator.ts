/**
 * The operator, as the adapters' READMEs describe one: every second or two it looks for runs
 * that `failed` because a provider step was discarded for a human, checks the provider (here:
 * the fake's records, as one would check Stripe's dashboard or SendGrid's activity), settles the
 * key with `resolveKey`, and `client.retry`s the step.
 *
 * - `UnknownOutcomeError` (the adapter could not tell whether the call took effect): an effect
 *   under the key → resolved `succeeded` with it; none → resolved `not_sent`; then retried.
 * - `DefinitiveFailureError` of an order whose card does not decline (Stripe replayed a stored
 *   5xx and the adapter found no object under its marker): retried, which sends a fresh key
 *   generation (`…#g1`).
 * - A declined card is the designed outcome: left alone. Anything else is left alone as well,
 *   and the checker fails the soak on it.
 */
import type { Client } from '@cyclone/core';
import { getLedgerEntry, resolveKey } from '@cyclone/idempotency';
import type { Fakes } from './fakes.js';
import type { Journal, OperatorAction } from './journal.js';
import { PROVIDER_NODES, type Provider } from './workload.js';

interface Discarded {
  run_id: string;
  node: string;
  last_message: string | null;
  last_stack: string | null;
  declined: boolean | null;
  key: string | null;
  error_code: string | null;
}

export class Operator {
  private stopped = false;
  private loop: Promise<void> | undefined;
  /** Steps left alone: expected (declined) or not the operator's to fix. */
  readonly leftAlone = new Map<string, string>();
  /** Failed attempts to settle a step (the database may be down). */
  private readonly failures = new Map<string, number>();

  constructor(
    private readonly client: Client,
    private readonly fakes: Fakes,
    private readonly journal: Journal,
    private readonly everyMs = 1_500,
  ) {}

  start(): void {
    this.loop = (async () => {
      while (!this.stopped) {
        await new Promise((r) => setTimeout(r, this.everyMs));
        await this.pass().catch(() => {}); // the database may be restarting: next time
      }
    })();
  }

  /** Steps waiting for the operator right now (discarded in a failed run, not left alone). */
  async backlog(): Promise<number> {
    return (await this.discarded()).filter((d) => !this.leftAlone.has(`${d.run_id}:${d.node}`))
      .length;
  }

  private async discarded(): Promise<Discarded[]> {
    const { rows } = await this.client.pool.query<Discarded>(
      `SELECT s.run_id, s.node, s.errors -> -1 ->> 'message' AS last_message,
              s.errors -> -1 ->> 'stack' AS last_stack,
              (r.input ->> 'declined')::boolean AS declined,
              l.key, l.error ->> 'code' AS error_code
       FROM cyclone.cyclone_steps s
       JOIN cyclone.cyclone_runs r ON r.id = s.run_id
       LEFT JOIN cyclone.cyclone_idempotency l ON l.run_id = s.run_id AND l.node = s.node
       WHERE s.state = 'discarded' AND r.state = 'failed'`,
    );
    return rows;
  }

  /** One look at the failed runs. */
  async pass(): Promise<void> {
    for (const d of await this.discarded()) {
      if (this.stopped) return;
      const id = `${d.run_id}:${d.node}`;
      if (this.leftAlone.has(id)) continue;
      try {
        await this.settle(d, id);
      } catch (err) {
        // The database may be restarting: next pass. A step that keeps failing is given up on.
        const n = (this.failures.get(id) ?? 0) + 1;
        this.failures.set(id, n);
        if (n >= 10) this.leftAlone.set(id, `the operator could not settle it: ${String(err)}`);
      }
    }
  }

  /** Settles one discarded step: resolves its key if need be, and retries it. */
  private async settle(d: Discarded, id: string): Promise<void> {
    const provider = (PROVIDER_NODES as Record<string, Provider>)[d.node] ?? null;
    const errorClass = (d.last_stack ?? '').split(':')[0] ?? '';
    if (d.node === 'charge' && d.declined && d.error_code === 'card_declined') {
      this.leftAlone.set(id, 'declined card (by design)');
      return;
    }
    const key = d.key ?? `${d.run_id}:${d.node}`;
    let action: Omit<OperatorAction, 'at'> | undefined;
    if (provider && errorClass === 'UnknownOutcomeError') {
      const outcome = this.lookUp(provider, key);
      await this.resolve(key, outcome, true);
      action = {
        runId: d.run_id,
        node: d.node,
        key,
        provider,
        cause: 'unknown_outcome',
        decision: outcome ? 'resolved_succeeded' : 'resolved_not_sent',
      };
    } else if (provider === 'stripe' && errorClass === 'DefinitiveFailureError' && !d.declined) {
      const outcome = this.lookUp(provider, key);
      await this.resolve(key, outcome, false);
      action = {
        runId: d.run_id,
        node: d.node,
        key,
        provider,
        cause: 'definitive_failure',
        decision: outcome ? 'resolved_succeeded' : 'retried',
      };
    } else {
      this.leftAlone.set(id, `${errorClass || 'error'}: ${d.last_message ?? ''}`.slice(0, 300));
      return;
    }
    await this.client.retry(d.run_id, d.node);
    this.journal.operator.push({ ...action, at: Date.now() });
  }

  /**
   * Resolves `key` as succeeded with what the provider has, else (when `notSent`) as not sent —
   * unless an earlier pass did already and only its retry failed (a success is final).
   */
  private async resolve(
    key: string,
    found: { result: unknown; ref: string } | undefined,
    notSent: boolean,
  ): Promise<void> {
    if ((await getLedgerEntry(this.client, key))?.phase === 'succeeded') return;
    if (found) {
      await resolveKey(this.client, key, {
        outcome: 'succeeded',
        result: found.result,
        providerRef: found.ref,
      });
    } else if (notSent) {
      await resolveKey(this.client, key, { outcome: 'not_sent' });
    }
  }

  /** What the provider has under `key` (any generation), as the adapter's result would be. */
  private lookUp(provider: Provider, key: string): { result: unknown; ref: string } | undefined {
    const mine = (k: string | undefined) => k === key || (k?.startsWith(`${key}#g`) ?? false);
    if (provider === 'stripe') {
      const pi = this.fakes.stripe
        .objects('payment_intent')
        .find((o) => mine((o.metadata as Record<string, string> | undefined)?.cyclone_key));
      return pi ? { result: pi, ref: pi.id } : undefined;
    }
    if (provider === 'sendgrid') {
      const m = this.fakes.sendgrid.sent.find((s) => mine(s.customArgs.cyclone_key));
      return m
        ? { result: { statusCode: 202, messageId: m.messageId }, ref: m.messageId }
        : undefined;
    }
    const m = this.fakes.twilio.created.find((x) => x.body === `soak ${key}`);
    if (!m) return undefined;
    return {
      result: {
        sid: m.sid,
        accountSid: m.accountSid,
        status: m.status,
        to: m.to,
        from: m.from,
        messagingServiceSid: m.messagingServiceSid,
        body: m.body,
        dateCreated: m.dateCreated.toISOString(),
        numSegments: '1',
        errorCode: m.errorCode,
      },
      ref: m.sid,
    };
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.loop;
  }
}
