/**
 * A database endpoint that accepts TCP connections and never answers (a half-open connection, a
 * dead load balancer, a failover in progress): connecting is bounded by a timeout, so
 * `Worker.start()` resolves (LISTEN given up for now, polling covers) and `stop()` returns
 * within its grace period, instead of both waiting forever.
 */
import net from 'node:net';
import { waitFor } from '@cyclone/testkit';
import { afterAll, beforeAll, describe, it } from 'vitest';
import { Client, newAction, newWorkflow, Worker } from '../src/index.js';

const Noop = newWorkflow('unresponsive_noop', {
  nodes: { only: { action: newAction('unresponsive_noop', async () => null) } },
});

describe('a database endpoint that never answers', () => {
  const sockets = new Set<net.Socket>();
  const server = net.createServer((s) => {
    sockets.add(s);
    s.on('error', () => {});
    s.on('close', () => sockets.delete(s));
  });
  let client: Client;
  let worker: Worker;

  beforeAll(async () => {
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const { port } = server.address() as net.AddressInfo;
    client = new Client({ connectionString: `postgres://root@127.0.0.1:${port}/unanswered` });
    worker = new Worker({ client, workflows: [Noop], pollIntervalMs: 100 });
  });

  afterAll(async () => {
    await worker?.stop({ graceMs: 100 }).catch(() => {});
    await client?.close();
    for (const s of sockets) s.destroy();
    await new Promise((r) => server.close(r));
  });

  it('start() resolves after the connect timeout, and stop() returns within its grace period', async () => {
    let started = false;
    void worker.start().then(() => {
      started = true;
    });
    // The connect timeout is 10 s.
    await waitFor('start() to resolve', () => started, { timeoutMs: 15_000, intervalMs: 100 });
    await waitFor('a connection attempt of the claim loop', () => sockets.size > 0);

    let stopped = false;
    void worker.stop({ graceMs: 200 }).then(() => {
      stopped = true;
    });
    // graceMs, then at most a second for the pools.
    await waitFor('stop() to return', () => stopped, { timeoutMs: 5_000 });
  });
});
