/**
 * The hard deadline `installDeadline` puts on a `stripe` client's requests (as `idempotentStripe`
 * does), under a network partition, with real sockets: the API is a recording HTTP server in a
 * network namespace of its own (@cyclone/testkit's ProviderPartition) whose frames are dropped on
 * the bridge. A create whose connect is blackholed, one written into the blackhole on a pooled
 * connection, and one whose answer is blackholed each fail within the client's timeout (+ a
 * margin for a loaded machine), and after the heal the server never receives a request later
 * than that. Classified `not_sent` only when the socket never connected. No SDK retries here
 * (`maxNetworkRetries: 0`): each retry has a deadline of its own. Prints the times.
 * `CYCLONE_TEST_NO_DEADLINE=1` runs the same without `installDeadline`.
 *
 * Skipped, with the reason, where network namespaces cannot be made (not root, no iproute2).
 */
import { netnsSupport, type PartitionOutcome, ProviderPartition } from '@cyclone/testkit';
import Stripe from 'stripe';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { classifyStripeError, installDeadline } from '../src/index.js';

const DEADLINE_MS = 2_000;
/** Timer lateness and scheduling on a loaded machine. */
const MARGIN_MS = 1_500;
/** Healed 4 s after the call started; then 6 s of watching, past a retransmission at 6.2 s. */
const TIMING = { waitMs: DEADLINE_MS + MARGIN_MS, healAfterMs: 4_000, afterHealMs: 6_000 };
const skipReason = netnsSupport();

describe.skipIf(skipReason !== undefined)('a Stripe create cut off by a partition', () => {
  let p: ProviderPartition;
  beforeAll(async () => {
    p = await ProviderPartition.start();
  }, 60_000);
  afterAll(async () => {
    await p?.close();
  });
  const client = () => {
    const s = new Stripe('sk_test_fake', {
      host: p.host.address,
      port: p.port,
      protocol: 'http',
      telemetry: false,
      timeout: DEADLINE_MS,
      maxNetworkRetries: 0,
    });
    if (process.env.CYCLONE_TEST_NO_DEADLINE !== '1') expect(installDeadline(s)).toBe(true);
    return s;
  };
  let n = 0;
  const create = (s: Stripe) => () =>
    s.charges.create(
      { amount: 100, currency: 'usd', source: 'tok_visa', description: 'x'.repeat(1_500) },
      { idempotencyKey: `k${++n}` },
    );
  const report = (name: string, o: PartitionOutcome) =>
    console.log(
      `stripe ${name}: failed after ${o.settledAfterMs ?? 'never'} ms (deadline ${DEADLINE_MS} ms), ` +
        `${String((o.error as { detail?: { code?: unknown } })?.detail?.code)}, classified ${classifyStripeError(o.error).kind}; ` +
        `requests received ${o.received.length}`,
    );

  it('fails within the deadline when its connect is blackholed, and never arrives later', async () => {
    const o = await p.blackholedConnect(create(client()), TIMING);
    report('connect blackholed', o);
    expect(o.settledAfterMs).toBeDefined();
    expect(o.settledAfterMs).toBeLessThanOrEqual(DEADLINE_MS + MARGIN_MS);
    expect(o.resolved).toBe(false);
    expect(o.received).toEqual([]);
    expect(classifyStripeError(o.error).kind).toBe('not_sent');
  }, 40_000);

  it('fails within the deadline when written into the blackhole, and never arrives later', async () => {
    const s = client();
    const o = await p.writtenIntoBlackhole(create(s), create(s), TIMING);
    report('written into the blackhole', o);
    expect(o.settledAfterMs).toBeLessThanOrEqual(DEADLINE_MS + MARGIN_MS);
    expect(o.resolved).toBe(false);
    // Nothing since the second call started: its request, sent into the blackhole, was discarded.
    expect(o.received).toEqual([]);
    expect(classifyStripeError(o.error).kind).toBe('ambiguous');
  }, 40_000);

  it('fails within the deadline, ambiguous, when its answer is blackholed', async () => {
    const o = await p.responseBlackholed(create(client()), TIMING);
    report('answer blackholed', o);
    expect(o.settledAfterMs).toBeLessThanOrEqual(DEADLINE_MS + MARGIN_MS);
    expect(o.resolved).toBe(false);
    expect(o.received).toHaveLength(1);
    expect(classifyStripeError(o.error).kind).toBe('ambiguous');
  }, 40_000);
});

if (skipReason !== undefined) {
  describe('a Stripe create cut off by a partition', () => {
    it.skip(`skipped: ${skipReason}`, () => {});
  });
}
