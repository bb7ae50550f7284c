/**
 * The hard deadline of `createMailService`'s sends under a network partition, with real sockets:
 * the provider is a recording HTTP server in a network namespace of its own (@cyclone/testkit's
 * ProviderPartition) whose frames are dropped on the bridge. A send whose connect is blackholed,
 * one written into the blackhole on a pooled connection, and one whose answer is blackholed each
 * fail within the deadline (+ a margin for a loaded machine), and after the heal the server never
 * receives a request later than that: the socket was closed in SYN-SENT or reset. Classified
 * `not_sent` only when the socket never connected. Prints the times. `CYCLONE_TEST_NO_DEADLINE=1`
 * runs the same with the mail service built as before the deadline (the SDK's agent).
 *
 * Skipped, with the reason, where network namespaces cannot be made (not root, no iproute2).
 */
import { classifyError } from '@cyclone/idempotency';
import { netnsSupport, type PartitionOutcome, ProviderPartition } from '@cyclone/testkit';
import { Client as SendGridClient } from '@sendgrid/client';
import { MailService } from '@sendgrid/mail';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { classifySendGridError, createMailService } from '../src/index.js';

const DEADLINE_MS = 2_000;
/** Timer lateness and scheduling on a loaded machine. */
const MARGIN_MS = 1_500;
/** Healed 4 s after the call started; then 6 s of watching, past a retransmission at 6.2 s. */
const TIMING = { waitMs: DEADLINE_MS + MARGIN_MS, healAfterMs: 4_000, afterHealMs: 6_000 };
const skipReason = netnsSupport();

const msg = {
  to: 'a@example.com',
  from: 'b@example.com',
  subject: 'deadline',
  text: 'x'.repeat(2_000),
};

describe.skipIf(skipReason !== undefined)('a SendGrid send cut off by a partition', () => {
  let p: ProviderPartition;
  beforeAll(async () => {
    p = await ProviderPartition.start();
  }, 60_000);
  afterAll(async () => {
    await p?.close();
  });
  const service = () => {
    if (process.env.CYCLONE_TEST_NO_DEADLINE !== '1') {
      return createMailService({
        apiKey: 'SG.test',
        baseUrl: `${p.origin}/`,
        timeoutMs: DEADLINE_MS,
      });
    }
    // What createMailService built before the hard deadline: the SDK's agent, axios' timeout.
    const c = new SendGridClient();
    c.setApiKey('SG.test');
    c.setDefaultRequest('baseUrl', `${p.origin}/`);
    const m = new MailService();
    m.setClient(c);
    m.setTimeout(DEADLINE_MS);
    return m;
  };
  const report = (name: string, o: PartitionOutcome) =>
    console.log(
      `sendgrid ${name}: failed after ${o.settledAfterMs ?? 'never'} ms (deadline ${DEADLINE_MS} ms), ` +
        `${String((o.error as { code?: unknown })?.code)}, classified ${classifySendGridError(o.error).kind}; ` +
        `requests received ${o.received.length}`,
    );

  it('fails within the deadline when its connect is blackholed, and never arrives later', async () => {
    const mail = service();
    const o = await p.blackholedConnect(() => mail.send(msg), TIMING);
    report('connect blackholed', o);
    expect(o.settledAfterMs).toBeDefined();
    expect(o.settledAfterMs).toBeLessThanOrEqual(DEADLINE_MS + MARGIN_MS);
    expect(o.resolved).toBe(false);
    expect(o.received).toEqual([]);
    expect(classifySendGridError(o.error).kind).toBe('not_sent');
  }, 40_000);

  it('fails within the deadline when written into the blackhole, and never arrives later', async () => {
    const mail = service();
    const o = await p.writtenIntoBlackhole(
      () => mail.send(msg),
      () => mail.send(msg),
      TIMING,
    );
    report('written into the blackhole', o);
    expect(o.settledAfterMs).toBeLessThanOrEqual(DEADLINE_MS + MARGIN_MS);
    expect(o.resolved).toBe(false);
    // Nothing since the second call started: its request, sent into the blackhole, was discarded.
    expect(o.received).toEqual([]);
    expect(classifySendGridError(o.error).kind).toBe('ambiguous');
  }, 40_000);

  it('fails within the deadline, ambiguous, when its answer is blackholed', async () => {
    const mail = service();
    const o = await p.responseBlackholed(() => mail.send(msg), TIMING);
    report('answer blackholed', o);
    expect(o.settledAfterMs).toBeLessThanOrEqual(DEADLINE_MS + MARGIN_MS);
    expect(o.resolved).toBe(false);
    expect(o.received).toHaveLength(1);
    expect(classifySendGridError(o.error).kind).toBe('ambiguous');
    expect(classifyError(o.error).kind).toBe('ambiguous');
  }, 40_000);
});

if (skipReason !== undefined) {
  describe('a SendGrid send cut off by a partition', () => {
    it.skip(`skipped: ${skipReason}`, () => {});
  });
}
