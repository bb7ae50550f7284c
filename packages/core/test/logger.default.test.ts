/**
 * Failures are visible by default: a `Client` and `Worker` given no logger write warnings and
 * errors to stderr, one readable line each (`stderrLogger`): a failed attempt, a discarded step;
 * `CYCLONE_LOG` sets the level, `silentLogger` silences them. (Vitest runs with
 * CYCLONE_LOG=silent; this file unsets it where it checks the default.)
 */
import { waitFor } from '@cyclone/testkit';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import {
  Client,
  NonRetryableError,
  newAction,
  newWorkflow,
  silentLogger,
  stderrLogger,
  Worker,
} from '../src/index.js';
import { formatLine } from '../src/logger.js';
import { createTestDb, type TestDb } from './support/db.js';

describe('stderrLogger', () => {
  it('writes one line: time, level, message, error, the step fields first and the worker last', () => {
    const lines: string[] = [];
    const log = stderrLogger({ level: 'warn', write: (l) => lines.push(l) }).child({
      workerId: 'host:1:ab',
    });
    log.child({ runId: 'r-1', node: 'charge', attempt: 2 }).warn(
      {
        kind: 'error',
        err: 'card declined\n  at x',
        state: 'retryable',
        delayMs: 1000,
        to: 'a b',
      },
      'step attempt failed',
    );
    log.info({}, 'worker started'); // below the level
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(
      /^\d\d:\d\d:\d\d\.\d{3} WARN {2}step attempt failed: card declined at x · runId=r-1 node=charge attempt=2 kind=error state=retryable delayMs=1000 · to="a b" · workerId=host:1:ab\n$/,
    );
  });

  it('takes its level from CYCLONE_LOG, else warn', () => {
    const lines: string[] = [];
    const write = (l: string) => lines.push(l);
    const saved = process.env.CYCLONE_LOG;
    try {
      process.env.CYCLONE_LOG = 'error';
      stderrLogger({ write }).warn({}, 'hidden');
      stderrLogger({ write }).error({}, 'shown');
      process.env.CYCLONE_LOG = 'silent';
      stderrLogger({ write }).error({}, 'hidden');
      process.env.CYCLONE_LOG = 'nonsense';
      stderrLogger({ write }).warn({}, 'shown at warn');
      stderrLogger({ write }).info({}, 'hidden');
    } finally {
      if (saved === undefined) delete process.env.CYCLONE_LOG;
      else process.env.CYCLONE_LOG = saved;
    }
    expect(lines.map((l) => l.slice(13).trim())).toEqual(['ERROR shown', 'WARN  shown at warn']);
  });

  it('formats values that are errors, objects and dates', () => {
    const line = formatLine(
      'error',
      { err: new Error('boom'), at: new Date('2026-01-01T00:00:00Z'), ids: [1, 2] },
      'oops',
    );
    expect(line.slice(13)).toBe('ERROR oops: boom · at=2026-01-01T00:00:00.000Z ids=[1,2]');
  });
});

describe('a worker with no logger', () => {
  let db: TestDb;
  let stderr: string[];
  const saved = process.env.CYCLONE_LOG;

  const Flaky = newWorkflow('log_default', {
    nodes: {
      flaky: {
        action: newAction(
          'log_flaky',
          (ctx) => {
            if (ctx.attempt === 1) throw new Error('provider unavailable');
            throw new NonRetryableError('card declined');
          },
          { maxAttempts: 3, backoff: () => 0 },
        ),
      },
    },
  });

  beforeAll(async () => {
    db = await createTestDb();
  });
  afterAll(async () => {
    await db?.drop();
  });
  afterEach(() => {
    vi.restoreAllMocks();
    if (saved === undefined) delete process.env.CYCLONE_LOG;
    else process.env.CYCLONE_LOG = saved;
  });

  /** Runs one run of Flaky to its end with `client`; what reached stderr meanwhile. */
  async function runFlaky(client: Client, logger?: typeof silentLogger): Promise<string[]> {
    stderr = [];
    vi.spyOn(process.stderr, 'write').mockImplementation((chunk: string | Uint8Array) => {
      stderr.push(String(chunk));
      return true;
    });
    const worker = new Worker({
      client,
      workflows: [Flaky],
      pollIntervalMs: 50,
      ...(logger ? { logger } : {}),
    });
    await worker.start();
    try {
      const { runId } = await client.submit(Flaky, {});
      await waitFor('the run to fail', async () => (await client.getRun(runId)).state === 'failed');
      return stderr;
    } finally {
      await worker.stop({ graceMs: 5_000 });
    }
  }

  it('writes the failed attempt and the discarded step to stderr, one line each', async () => {
    delete process.env.CYCLONE_LOG;
    const client = new Client({ connectionString: db.url });
    try {
      const lines = (await runFlaky(client)).join('').split('\n').filter(Boolean);
      const failed = lines.find((l) =>
        / WARN {2}step attempt failed: provider unavailable · /.test(l),
      );
      expect(failed).toMatch(/node=flaky attempt=1 kind=error state=retryable delayMs=0/);
      const discarded = lines.find((l) => / ERROR step discarded/.test(l));
      expect(discarded).toMatch(
        /step discarded, no further attempt \(`cyclone retry \S+ flaky` reopens it\): card declined · runId=\S+ node=flaky attempt=2 kind=non_retryable state=discarded · workerId=/,
      );
      // Nothing below warn (no "worker started"), and nothing but these lines.
      expect(lines.every((l) => / (WARN |ERROR) /.test(l))).toBe(true);
    } finally {
      await client.close();
    }
  });

  it('is silent when given silentLogger (on the worker or on the client)', async () => {
    delete process.env.CYCLONE_LOG;
    const client = new Client({ connectionString: db.url });
    try {
      expect(await runFlaky(client, silentLogger)).toEqual([]);
    } finally {
      await client.close();
    }
    const quiet = new Client({ connectionString: db.url, logger: silentLogger });
    try {
      expect(await runFlaky(quiet)).toEqual([]);
    } finally {
      await quiet.close();
    }
  });
});
