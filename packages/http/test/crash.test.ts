/**
 * A step that calls an API through `idempotentFetch` can crash at any point and the API sees one
 * effect. A real worker child process (http-worker.ts) is SIGKILLed inside the step; an
 * in-process worker then rescues the step once its lease expires (the scenarios of
 * @cyclone/testkit-engine's `crashSuite`, plus the answer lost on its way with the default
 * policy, which re-sends the key).
 */
import { getLedgerEntry } from '@cyclone/idempotency';
import { waitFor } from '@cyclone/testkit';
import { crashSuite } from '@cyclone/testkit-engine';
import { expect, it } from 'vitest';
import { FakeHttpApi } from '../src/testing/index.js';
import { CrashShip, configureCrash } from './support/crash-flows.js';
import { createTestDb } from './support/db.js';
import { inspect } from './support/harness.js';

const crash = crashSuite({
  provider: 'HTTP API',
  call: 'shipment',
  workflow: CrashShip,
  node: 'ship',
  lines: { calling: 'CALLING', called: 'CALLED' },
  refPattern: 'shipment_\\d+',
  script: new URL('./support/http-worker.ts', import.meta.url),
  readyTimeoutMs: 30_000,
  // 'fail', so that the suite's "during the call" scenario stops for an operator.
  input: { onUnknown: 'fail' },
  createTestDb,
  startFake: async () => {
    const fake = await FakeHttpApi.start();
    configureCrash({ baseUrl: fake.url, emit: () => {}, victim: false });
    return fake;
  },
  childEnv: (fake) => ({ FAKE_HTTP_URL: fake.url, CRASH_VICTIM: '1' }),
  firstRef: (fake) => fake.effects[0]?.id,
  performed: (fake) => fake.count() === 1,
  // The rescuer got the answer from the ledger: one POST in all, one effect.
  expectOneCall: (fake) => {
    expect(fake.requests.map((r) => `${r.method} ${r.path}`)).toEqual(['POST /v1/shipments']);
    expect(fake.count()).toBe(1);
  },
  expectOutput: (output, shipment) =>
    expect(output).toMatchObject({ shipment, attempt: 2, replayed: 'ledger' }),
  ledgerEntry: getLedgerEntry,
  loseNextAnswer: (fake) => {
    fake.inject({ kind: 'delay', ms: 60_000 });
  },
});

it("SIGKILL while the answer is on the way (done at the API, ledger still 'started'), default policy: the rescuer re-sends the key and gets the first answer; one effect", async () => {
  const { fake, client } = crash;
  // Fault: the API does the work, stores it under the key, and holds the answer back.
  fake.inject({ kind: 'delay', ms: 60_000 });
  const child = await crash.victim();
  const { runId } = await client.submit(CrashShip, { onUnknown: 'recall' });
  await waitFor('the shipment at the fake', () => fake.count() === 1);
  await child.kill();
  const before = await inspect(crash, runId);
  expect(before.ledger[0]).toMatchObject({ phase: 'started', ownerAttempt: 1 });

  await crash.rescue(runId);
  const { run, step } = await inspect(crash, runId);
  expect(run.state, JSON.stringify(step.errors)).toBe('completed');
  expect(fake.keyedRequests.map((r) => r.key)).toEqual([`${runId}:ship`, `${runId}:ship`]);
  expect(fake.keyedRequests[1]?.outcome).toBe('replayed');
  expect(fake.count()).toBe(1);
  expect(step.output).toMatchObject({ shipment: 'shipment_1', attempt: 2, replayed: null });
});
