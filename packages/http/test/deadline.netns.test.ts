/**
 * The transport of `idempotentFetch`'s guarded requests (`deadlineFetch`, its default) under a
 * network partition, with real sockets: the API is a recording HTTP server in a network namespace
 * of its own (@cyclone/testkit's ProviderPartition) whose frames are dropped on the bridge. A POST
 * whose connect is blackholed, one written into the blackhole on a pooled connection, and one
 * whose answer is blackholed each fail within the deadline (+ a margin for a loaded machine), and
 * after the heal the server never receives a request later than that. Classified `not_sent` only
 * when the socket never connected. Prints the times. `CYCLONE_TEST_OLD_TRANSPORT=1` runs the same
 * against what the adapter used before (the platform's fetch with an `AbortSignal.timeout`).
 *
 * Skipped, with the reason, where network namespaces cannot be made (not root, no iproute2).
 */
import { classifyError } from '@cyclone/idempotency';
import { netnsSupport, type PartitionOutcome, ProviderPartition } from '@cyclone/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deadlineFetch } from '../src/index.js';

const DEADLINE_MS = 2_000;
/** Timer lateness and scheduling on a loaded machine. */
const MARGIN_MS = 1_500;
/** Healed 4 s after the call started; then 6 s of watching, past a retransmission at 6.2 s. */
const TIMING = { waitMs: DEADLINE_MS + MARGIN_MS, healAfterMs: 4_000, afterHealMs: 6_000 };
const skipReason = netnsSupport();
const old = process.env.CYCLONE_TEST_OLD_TRANSPORT === '1';

describe.skipIf(skipReason !== undefined)('a guarded HTTP request cut off by a partition', () => {
  let p: ProviderPartition;
  beforeAll(async () => {
    p = await ProviderPartition.start();
  }, 60_000);
  afterAll(async () => {
    await p?.close();
  });
  const post = async () => {
    const init = {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': 'k1' },
      body: JSON.stringify({ amount: 100, pad: 'x'.repeat(2_000) }),
    };
    const res = old
      ? await fetch(`${p.origin}/charges`, { ...init, signal: AbortSignal.timeout(DEADLINE_MS) })
      : await deadlineFetch(DEADLINE_MS)(`${p.origin}/charges`, init);
    await res.arrayBuffer();
    return res;
  };
  const report = (name: string, o: PartitionOutcome) =>
    console.log(
      `http ${name}: failed after ${o.settledAfterMs ?? 'never'} ms (deadline ${DEADLINE_MS} ms), ` +
        `${String((o.error as { code?: unknown; name?: unknown })?.code ?? (o.error as { name?: unknown })?.name)}, classified ${classifyError(o.error).kind}; ` +
        `requests received ${o.received.length} ${JSON.stringify(o.received.map((r) => ({ ...r, sinceStart: r.at - o.startedAt, sinceHeal: r.at - o.healedAt })))}`,
    );

  it('answers through the deadline transport as fetch would', async () => {
    // Another deadline: another agent, so no connection is left in the pool of the others.
    const f = deadlineFetch(DEADLINE_MS + 1);
    const res = await f(`${p.origin}/charges`, { method: 'POST', body: '{}' });
    expect(res.status).toBe(200);
    expect(res.url).toBe(`${p.origin}/charges`);
    const again = await f(`${p.origin}/charges`, { method: 'POST' });
    expect(await again.json()).toMatchObject({ id: expect.stringMatching(/^obj_/) });
  });

  it('fails within the deadline when its connect is blackholed, and never arrives later', async () => {
    const o = await p.blackholedConnect(post, TIMING);
    report('connect blackholed', o);
    expect(o.settledAfterMs).toBeDefined();
    expect(o.settledAfterMs).toBeLessThanOrEqual(DEADLINE_MS + MARGIN_MS);
    expect(o.resolved).toBe(false);
    expect(o.received).toEqual([]);
    expect(classifyError(o.error).kind).toBe('not_sent');
  }, 40_000);

  it('fails within the deadline when written into the blackhole, and never arrives later', async () => {
    const o = await p.writtenIntoBlackhole(post, post, TIMING);
    report('written into the blackhole', o);
    expect(o.settledAfterMs).toBeLessThanOrEqual(DEADLINE_MS + MARGIN_MS);
    expect(o.resolved).toBe(false);
    // Nothing since the second call started: its request, sent into the blackhole, was discarded.
    expect(o.received).toEqual([]);
    expect(classifyError(o.error).kind).toBe('ambiguous');
  }, 40_000);

  it('fails within the deadline, ambiguous, when its answer is blackholed', async () => {
    const o = await p.responseBlackholed(post, TIMING);
    report('answer blackholed', o);
    expect(o.settledAfterMs).toBeLessThanOrEqual(DEADLINE_MS + MARGIN_MS);
    expect(o.resolved).toBe(false);
    expect(o.received).toHaveLength(1);
    expect(classifyError(o.error).kind).toBe('ambiguous');
  }, 40_000);
});

if (skipReason !== undefined) {
  describe('a guarded HTTP request cut off by a partition', () => {
    it.skip(`skipped: ${skipReason}`, () => {});
  });
}
