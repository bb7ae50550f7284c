/**
 * The crash tests every adapter repeats: a real worker child process (the victim) SIGKILLed at a
 * precise point of a guarded provider call, then an in-process rescuer worker that picks the
 * step up once its lease expires. `crashSuite` defines the file's lifecycle (an isolated
 * database, a client, a fresh fake per test, no child outliving its test) and the standard
 * scenarios; the adapter gives what differs (its fake, its child script, its own checks), and
 * adds tests of its own through the returned harness. Under `CYCLONE_TEST_VIA=pgbouncer` (a
 * package's `@pgbouncer` project) the client, the rescuer and the victim go through PgBouncer.
 */
import { Client, type RunInfo, type StepInfo, type Workflow } from '@cyclone/core';
import {
  type ChildWorker,
  engineClientOptions,
  engineUrl,
  killAllChildren,
  spawnWorker,
  waitFor,
} from '@cyclone/testkit';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startWorker } from './harness.js';

/** What an adapter gives `crashSuite`. `F` is its fake, `I` the workflow's input. */
export interface CrashSuiteSpec<F extends { close(): Promise<void> }, I> {
  /** The provider, in test titles (`SendGrid`). */
  provider: string;
  /** The guarded call, in test titles (`send`, `create`, `charge`). */
  call: string;
  /**
   * The one-node workflow of the crash tests. Its handler prints `<calling> <runId> <attempt>`
   * before the call and `<called> <runId> <attempt> <ref>` after it, and in the victim process
   * then never returns on attempt 1.
   */
  workflow: Workflow<I>;
  /** The workflow's node. Default `send`. */
  node?: string;
  /** The handler's line words (`SENDING`/`SENT` by default). */
  lines?: { calling: string; called: string };
  /** The provider's reference in the `called` line, as a RegExp source (e.g. `\\S+`). */
  refPattern: string;
  /** The victim's script (its main calls `startChildWorker`). */
  script: URL;
  /** How long the victim may take to say READY. Default 20 s. */
  readyTimeoutMs?: number;
  /** The input of a run (a policy of `'fail'` for an unknown outcome, where the adapter has one). */
  input: NoInfer<I>;
  /** An isolated database for the test file (the package's migrated template). */
  createTestDb(): Promise<{ url: string; drop(): Promise<void> }>;
  /** Starts a fake and points this process's workflow at it, as a rescuer (not a victim). */
  startFake(): Promise<F>;
  /** What the victim needs to reach the fake (`DATABASE_URL` and `CRASH_LEASE_MS` are added). */
  childEnv(fake: F): Record<string, string>;
  /** The reference of the fake's first effect (`X-Message-Id`, SID, payment intent id). */
  firstRef(fake: F): string | undefined;
  /** True once the fake has performed the one call (the effect is there). */
  performed(fake: F): boolean;
  /** Asserts the fake saw the one call of the run and nothing more. */
  expectOneCall(fake: F): void;
  /** Asserts the rescued step's output, given the reference of the victim's call. */
  expectOutput(output: unknown, ref: string, fake: F): void;
  /** The ledger row of a key (`@cyclone/idempotency`'s `getLedgerEntry`). */
  ledgerEntry(client: Client, key: string): Promise<object | undefined>;
  /**
   * The standard "during the call" scenario, for an adapter whose `input` discards the step on
   * an unknown outcome: queues the fault that performs the next call and never answers in time.
   * Omit it to leave that scenario out.
   */
  loseNextAnswer?(fake: F): void;
}

/** What a crash test file gets back from `crashSuite`, for tests of its own. */
export interface CrashHarness<F> {
  /** The file's client. */
  readonly client: Client;
  /** The current test's fake. */
  readonly fake: F;
  /** Spawns a victim worker process against the current fake; resolves once it is READY. */
  victim(): Promise<ChildWorker>;
  /** Runs an in-process rescuer until the run is finished; resolves with the run. */
  rescue(runId: string): Promise<RunInfo>;
  /** The step of the workflow's node in a run. */
  step(runId: string): Promise<StepInfo>;
}

/** How long a victim holds its lease (ms): short, so that the rescuer gets the step soon. */
const VICTIM_LEASE_MS = 1_000;

/**
 * Defines the lifecycle hooks and the standard crash scenarios of an adapter's crash test file
 * (see the module comment and `CrashSuiteSpec`):
 * - SIGKILL after the call, before the step completed: the rescuer calls nothing and completes
 *   with the result the ledger kept;
 * - with `loseNextAnswer`, SIGKILL during the call (the provider performed it, no answer yet):
 *   the rescuer calls nothing and discards the step for an operator, the key left `unknown`.
 */
export function crashSuite<F extends { close(): Promise<void> }, I>(
  spec: CrashSuiteSpec<F, I>,
): CrashHarness<F> {
  const node = spec.node ?? 'send';
  const { calling, called } = spec.lines ?? { calling: 'SENDING', called: 'SENT' };
  let db: Awaited<ReturnType<CrashSuiteSpec<F, I>['createTestDb']>> | undefined;
  let client: Client | undefined;
  let fake: F | undefined;

  beforeAll(async () => {
    db = await spec.createTestDb();
    client = new Client({
      connectionString: engineUrl(db.url),
      poolSize: 6,
      ...engineClientOptions,
    });
  });
  afterAll(async () => {
    await killAllChildren();
    await fake?.close();
    await client?.close();
    await db?.drop();
  });
  beforeEach(async () => {
    fake = await spec.startFake();
  });
  afterEach(async () => {
    await killAllChildren();
    await fake?.close();
  });

  const h: CrashHarness<F> = {
    get client() {
      if (!client) throw new Error('crashSuite: no client outside a test');
      return client;
    },
    get fake() {
      if (!fake) throw new Error('crashSuite: no fake outside a test');
      return fake;
    },
    victim: () => {
      if (!db) throw new Error('crashSuite: no database outside a test');
      return spawnWorker({
        script: spec.script,
        env: {
          DATABASE_URL: engineUrl(db.url),
          CRASH_LEASE_MS: String(VICTIM_LEASE_MS),
          ...spec.childEnv(h.fake),
        },
        readyTimeoutMs: spec.readyTimeoutMs ?? 20_000,
      });
    },
    rescue: async (runId) => {
      const rescuer = await startWorker(h.client, [spec.workflow]);
      try {
        return await h.client.waitForRun(runId, { timeoutMs: 20_000, pollMs: 25 });
      } finally {
        await rescuer.stop();
      }
    },
    step: async (runId) => {
      const step = (await h.client.getRun(runId)).steps.find((s) => s.node === node);
      if (!step) throw new Error(`run ${runId} has no node ${node}`);
      return step;
    },
  };

  describe(`SIGKILL of a worker process inside the ${spec.provider} ${spec.call}`, () => {
    it(`after the ${spec.call}, before the step completed: the retry calls ${spec.provider} no more and completes with the stored result`, async () => {
      const child = await h.victim();
      const { runId } = await h.client.submit(spec.workflow, spec.input);
      const m = await child.waitForLine(new RegExp(`^${called} ${runId} 1 (${spec.refPattern})$`));
      const ref = m[1] as string;
      expect(ref).toBe(spec.firstRef(h.fake));
      const key = `${runId}:${node}`;
      expect(await spec.ledgerEntry(h.client, key)).toMatchObject({ phase: 'succeeded' });
      expect((await h.step(runId)).state).toBe('running');
      expect((await child.kill('SIGKILL')).signal).toBe('SIGKILL');
      // Dead, and the lease not yet reclaimed: the step still shows the victim's attempt.
      expect((await h.step(runId)).state).toBe('running');

      const run = await h.rescue(runId);
      expect(run.state).toBe('completed');
      const step = run.steps.find((s) => s.node === node);
      expect(step?.attempt).toBe(2);
      spec.expectOutput(step?.output, ref, h.fake);
      spec.expectOneCall(h.fake);
      expect(await spec.ledgerEntry(h.client, key)).toMatchObject({
        phase: 'succeeded',
        providerRef: ref,
        calls: 1,
        ownerAttempt: 1,
      });
    });

    const loseNextAnswer = spec.loseNextAnswer;
    if (loseNextAnswer) {
      it(`during the ${spec.call} (${spec.provider} performed it, no answer yet): the retry calls no more and stops for an operator`, async () => {
        loseNextAnswer(h.fake);
        const child = await h.victim();
        const { runId } = await h.client.submit(spec.workflow, spec.input);
        await child.waitForLine(new RegExp(`^${calling} ${runId} 1$`));
        await waitFor(`${spec.provider} performing the ${spec.call}`, () => spec.performed(h.fake));
        await child.kill('SIGKILL');

        const run = await h.rescue(runId);
        expect(run.state).toBe('failed');
        const step = run.steps.find((s) => s.node === node);
        expect(step?.state).toBe('discarded');
        expect(step?.errors.at(-1)?.kind).toBe('non_retryable');
        expect(step?.errors.at(-1)?.message).toMatch(
          new RegExp(`unknown outcome for idempotency key .*:${node}: the call made by attempt 1`),
        );
        spec.expectOneCall(h.fake);
        expect(await spec.ledgerEntry(h.client, `${runId}:${node}`)).toMatchObject({
          phase: 'unknown',
          calls: 1,
        });
      });
    }
  });

  return h;
}
