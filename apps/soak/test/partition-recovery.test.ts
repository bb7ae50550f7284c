/**
 * How the soak sees a partitioned worker working again: its first handler start after the heal,
 * read from the worker's own starts (a step's list mixes workers whose messages may come out of
 * order), and the window after the heal during which the chaos spares it kills and stalls.
 */
import { describe, expect, it } from 'vitest';
import { Journal } from '../src/journal.js';
import { recoveringFromPartition } from '../src/partition.js';

describe('a partitioned worker working again', () => {
  it("is its first start after the heal, whatever other workers' starts came after it", () => {
    const j = new Journal();
    // The healed worker w1 starts the step at 105; w2's earlier start (at 90) arrives later.
    j.recordStart('r', 'n', { attempt: 2, at: 105, workerId: 'w1' });
    j.recordStart('r', 'n', { attempt: 1, at: 90, workerId: 'w2' });
    j.recordStart('r', 'm', { attempt: 1, at: 130, workerId: 'w1' });
    expect(j.firstStartAfter('w1', 100)).toBe(105);
    expect(j.firstStartAfter('w1', 130)).toBeUndefined();
    expect(j.firstStartAfter('w2', 100)).toBeUndefined();
  });

  it('is waited for (no kill or stall) until seen, or --max-recovery after the heal', () => {
    const j = new Journal();
    const p = {
      kind: 'partition' as const,
      at: 0,
      slot: 1,
      workerId: 'w1',
      cutMs: 10_000,
      orphans: 2,
      takeoverMs: null,
      healedAt: null as number | null,
      recoveryMs: null as number | null,
      unmeasured: null,
    };
    j.faults.push(p);
    // Still cut off: the chaos's own rule (one partition, nothing else meanwhile) covers it.
    expect(recoveringFromPartition(j, 'w1', 30_000, 11_000)).toBe(false);
    p.healedAt = 10_000;
    expect(recoveringFromPartition(j, 'w1', 30_000, 11_000)).toBe(true);
    expect(recoveringFromPartition(j, 'w2', 30_000, 11_000)).toBe(false);
    expect(recoveringFromPartition(j, 'w1', 30_000, 40_000)).toBe(false);
    p.recoveryMs = 2_500;
    expect(recoveringFromPartition(j, 'w1', 30_000, 11_000)).toBe(false);
  });
});
