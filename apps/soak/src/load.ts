/**
 * The load: submits runs at a steady rate with `submitOnce` and a key per run (`soak-<n>`), so
 * that a submission whose answer was lost (a terminated connection, PostgreSQL restarting) is
 * simply tried again under the same key: it can neither be lost nor made twice. A run counts as
 * submitted once a submission returned its id.
 */
import type { Client } from '@cyclone/core';
import type { Journal } from './journal.js';
import type { Prng } from './prng.js';
import { Batch, Order } from './workload.js';

export interface LoadOptions {
  rate: number;
  maxRuns: number;
  /** Share of orders whose card declines. */
  declineShare: number;
  /** A `soak_batch` part lasts this long (the lease × 1.5: kept only by heartbeats). */
  longStepMs: number;
}

export class Load {
  private seq = 0;
  private stopped = false;
  private readonly pending = new Set<Promise<void>>();
  private loop: Promise<void> | undefined;

  constructor(
    private readonly client: Client,
    private readonly journal: Journal,
    private readonly prng: Prng,
    private readonly options: LoadOptions,
  ) {}

  /** Starts submitting; `stop()` ends it. */
  start(): void {
    this.loop = this.run();
  }

  private async run(): Promise<void> {
    const intervalMs = 1000 / this.options.rate;
    const t0 = Date.now();
    while (!this.stopped && this.seq < this.options.maxRuns) {
      const due = t0 + this.seq * intervalMs;
      const wait = due - Date.now();
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
      if (this.stopped) break;
      const p = this.submit(this.seq++);
      this.pending.add(p);
      void p.finally(() => this.pending.delete(p));
    }
  }

  /** Submits run number `n`, trying again until it is confirmed (or the soak gives up). */
  private async submit(n: number): Promise<void> {
    const key = `soak-${n}`;
    const isOrder = this.prng.next() < 0.75;
    const declined = isOrder && this.prng.next() < this.options.declineShare;
    const amount = this.prng.int(100, 50_000);
    const phone = `+1555${String(this.prng.int(0, 9_999_999)).padStart(7, '0')}`;
    const giveUp = Date.now() + 120_000;
    for (;;) {
      try {
        const { runId } = isOrder
          ? await this.client.submitOnce(Order, key, {
              orderId: `o-${n}`,
              amount,
              email: `buyer${n}@example.com`,
              phone,
              declined,
            })
          : await this.client.submitOnce(Batch, key, {
              batchId: `b-${n}`,
              longMs: this.options.longStepMs,
            });
        this.journal.submitted.set(key, {
          key,
          runId,
          workflow: isOrder ? 'soak_order' : 'soak_batch',
          declined,
          at: Date.now(),
        });
        return;
      } catch {
        // Not confirmed: the database may be restarting. The same key makes a retry safe.
        this.journal.submitRetries++;
        if (Date.now() > giveUp) return;
        await new Promise((r) => setTimeout(r, 250));
      }
    }
  }

  /** Runs asked for so far. */
  get asked(): number {
    return this.seq;
  }

  /** Stops submitting new runs and waits for the submissions in flight. */
  async stop(): Promise<void> {
    this.stopped = true;
    await this.loop;
    await Promise.all([...this.pending]);
  }
}
