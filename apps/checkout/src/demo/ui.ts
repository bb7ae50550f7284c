/**
 * `pnpm demo --ui`: the operator UI (@cyclone/ui) on the demo's database, served on loopback
 * after the summary, so that the runs the demo just made (a killed worker's steps taken over, the
 * lost provider responses, the approvals) can be looked at in the browser.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Client } from '@cyclone/core';
import { createUi } from '@cyclone/ui';

/**
 * Serves the UI for `client`'s database on 127.0.0.1:`port` (0: any free port) until `until`
 * settles (default: SIGINT or SIGTERM), telling `say` its URL once it listens.
 * @throws the listen error (a port in use).
 */
export async function serveUi(
  client: Client,
  port: number,
  say: (line: string) => void,
  until: Promise<unknown> = signalled(),
): Promise<void> {
  const ui = createUi({ client });
  const server = createServer((req, res) => void ui.nodeHandler(req, res));
  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, '127.0.0.1', () => resolve());
    });
    const { port: bound } = server.address() as AddressInfo;
    say(`\nCyclone UI: http://127.0.0.1:${bound}/ (the demo's database); Ctrl-C stops it.`);
    await until;
  } finally {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
    await ui.close();
  }
}

/** Resolves at the first SIGINT or SIGTERM. */
function signalled(): Promise<void> {
  return new Promise((resolve) => {
    const stop = () => {
      process.off('SIGINT', stop);
      process.off('SIGTERM', stop);
      resolve();
    };
    process.on('SIGINT', stop);
    process.on('SIGTERM', stop);
  });
}
