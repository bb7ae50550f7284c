/**
 * A process that stops its worker and closes its client exits at once: stop() leaves no timer
 * behind (its bounded waits clear theirs), so `await worker.stop(); await client.close()` is all
 * a script needs, whatever its graceMs.
 */
import { spawnSync } from 'node:child_process';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDb, type TestDb } from './support/db.js';

const here = dirname(fileURLToPath(import.meta.url));

const script = `
import { Client, newAction, newWorkflow, Worker } from '@cyclone/core';
const client = new Client({ connectionString: process.env.DATABASE_URL });
const wf = newWorkflow('exit_check', { nodes: { a: { action: newAction('a', async () => 1) } } });
const worker = new Worker({ client, workflows: [wf], leaseMs: 30_000 });
await worker.start();
const { runId } = await client.submit(wf, {});
await client.waitForRun(runId, { timeoutMs: 20_000 });
const t = Date.now();
await worker.stop({ graceMs: 600_000 });
await client.close();
console.log('STOPPED', Date.now() - t);
`;

describe('Worker.stop', () => {
  let db: TestDb;
  beforeAll(async () => {
    db = await createTestDb();
  });
  afterAll(async () => {
    await db.drop();
  });

  it('leaves nothing that keeps the process alive, even with a long grace period', () => {
    const started = Date.now();
    const r = spawnSync(
      process.execPath,
      ['--conditions=@cyclone/source', '--import', 'tsx', '--input-type=module', '-e', script],
      {
        cwd: here,
        env: { ...process.env, DATABASE_URL: db.url },
        encoding: 'utf8',
        timeout: 45_000,
      },
    );
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    expect(r.stdout).toMatch(/^STOPPED \d+/m);
    // The process ended on its own, long before the 600 s grace period or the 30 s lease.
    expect(Date.now() - started).toBeLessThan(25_000);
  });
});
