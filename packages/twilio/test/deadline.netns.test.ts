/**
 * The hard deadline `installDeadline` puts on a `twilio` client's requests (as `idempotentTwilio`
 * does), under a network partition, with real sockets: the provider is a recording HTTP server in
 * a network namespace of its own (@cyclone/testkit's ProviderPartition) whose frames are dropped
 * on the bridge. A create whose connect is blackholed, one written into the blackhole on a pooled
 * connection, and one whose answer is blackholed each fail within the client's timeout (+ a
 * margin for a loaded machine), and after the heal the server never receives a request later
 * than that. Classified `not_sent` only when the socket never connected. Prints the times.
 *
 * Skipped, with the reason, where network namespaces cannot be made (not root, no iproute2).
 */
import { netnsSupport, type PartitionOutcome, ProviderPartition } from '@cyclone/testkit';
import twilio from 'twilio';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { classifyTwilioError, installDeadline } from '../src/index.js';
import { LoopbackRequestClient } from '../src/testing/index.js';

const DEADLINE_MS = 2_000;
/** Timer lateness and scheduling on a loaded machine. */
const MARGIN_MS = 1_500;
/** Healed 4 s after the call started; then 6 s of watching, past a retransmission at 6.2 s. */
const TIMING = { waitMs: DEADLINE_MS + MARGIN_MS, healAfterMs: 4_000, afterHealMs: 6_000 };
const skipReason = netnsSupport();

const params = { to: '+15005550006', from: '+15005550001', body: 'x'.repeat(1_500) };

describe.skipIf(skipReason !== undefined)('a Twilio create cut off by a partition', () => {
  let p: ProviderPartition;
  beforeAll(async () => {
    p = await ProviderPartition.start();
  }, 60_000);
  afterAll(async () => {
    await p?.close();
  });
  const client = () => {
    const c = twilio('AC00000000000000000000000000000000', 'token', {
      httpClient: new LoopbackRequestClient(p.origin, { timeout: DEADLINE_MS }),
    });
    if (process.env.CYCLONE_TEST_NO_DEADLINE !== '1') {
      expect(installDeadline(c)).toBe(DEADLINE_MS);
    }
    return c;
  };
  const report = (name: string, o: PartitionOutcome) =>
    console.log(
      `twilio ${name}: failed after ${o.settledAfterMs ?? 'never'} ms (deadline ${DEADLINE_MS} ms), ` +
        `${String((o.error as { code?: unknown })?.code)}, classified ${classifyTwilioError(o.error).kind}; ` +
        `requests received ${o.received.length}`,
    );

  it('fails within the deadline when its connect is blackholed, and never arrives later', async () => {
    const c = client();
    const o = await p.blackholedConnect(() => c.messages.create(params), TIMING);
    report('connect blackholed', o);
    expect(o.settledAfterMs).toBeDefined();
    expect(o.settledAfterMs).toBeLessThanOrEqual(DEADLINE_MS + MARGIN_MS);
    expect(o.resolved).toBe(false);
    expect(o.received).toEqual([]);
    expect(classifyTwilioError(o.error).kind).toBe('not_sent');
  }, 40_000);

  it('fails within the deadline when written into the blackhole, and never arrives later', async () => {
    const c = client();
    const o = await p.writtenIntoBlackhole(
      () => c.messages.create(params),
      () => c.messages.create(params),
      TIMING,
    );
    report('written into the blackhole', o);
    expect(o.settledAfterMs).toBeLessThanOrEqual(DEADLINE_MS + MARGIN_MS);
    expect(o.resolved).toBe(false);
    // Nothing since the second call started: its request, sent into the blackhole, was discarded.
    expect(o.received).toEqual([]);
    expect(classifyTwilioError(o.error).kind).toBe('ambiguous');
  }, 40_000);

  it('fails within the deadline, ambiguous, when its answer is blackholed', async () => {
    const c = client();
    const o = await p.responseBlackholed(() => c.messages.create(params), TIMING);
    report('answer blackholed', o);
    expect(o.settledAfterMs).toBeLessThanOrEqual(DEADLINE_MS + MARGIN_MS);
    expect(o.resolved).toBe(false);
    expect(o.received).toHaveLength(1);
    expect(classifyTwilioError(o.error).kind).toBe('ambiguous');
  }, 40_000);
});

if (skipReason !== undefined) {
  describe('a Twilio create cut off by a partition', () => {
    it.skip(`skipped: ${skipReason}`, () => {});
  });
}
