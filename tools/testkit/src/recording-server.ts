/**
 * A stand-in provider for partition tests, run as a child process inside a host's network
 * namespace (provider-partition.ts): an HTTP server on `LISTEN_HOST`, port chosen by the kernel,
 * that answers every request after reading it whole and prints one line per request it received
 * (`REQ <epoch ms> <method> <path> <body bytes>`), so the test sees exactly what reached the
 * provider, and when. The answer fits the path: SendGrid's 202, a Twilio message (201), a Stripe
 * object, or `{ "id": … }`. A `DELAY <ms>` line on stdin delays the answers from then on.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createInterface } from 'node:readline';

let delayMs = 0;
let n = 0;

const server = createServer((req, res) => {
  let bytes = 0;
  req.on('data', (c: Buffer) => {
    bytes += c.length;
  });
  req.on('end', () => {
    process.stdout.write(`REQ ${Date.now()} ${req.method} ${req.url} ${bytes}\n`);
    n += 1;
    const answer = () => {
      const path = req.url ?? '';
      if (path.startsWith('/v3/mail/send')) {
        res.writeHead(202, { 'x-message-id': `msg_${n}` });
        res.end();
        return;
      }
      const now = new Date().toUTCString();
      const body = path.endsWith('/Messages.json')
        ? {
            sid: `SM${String(n).padStart(32, '0')}`,
            account_sid: 'AC00000000000000000000000000000000',
            status: 'queued',
            to: '+15005550006',
            from: '+15005550001',
            body: 'x',
            date_created: now,
            num_segments: '1',
          }
        : path.startsWith('/v1/')
          ? { id: `ch_${n}`, object: 'charge', amount: 100, currency: 'usd', metadata: {} }
          : { id: `obj_${n}` };
      res.writeHead(path.endsWith('/Messages.json') ? 201 : 200, {
        'content-type': 'application/json',
      });
      res.end(JSON.stringify(body));
    };
    if (delayMs > 0) setTimeout(answer, delayMs);
    else answer();
  });
});

createInterface({ input: process.stdin }).on('line', (line) => {
  const m = /^DELAY (\d+)$/.exec(line.trim());
  if (m) {
    delayMs = Number(m[1]);
    process.stdout.write(`DELAYED ${delayMs}\n`);
  }
});

server.listen(0, process.env.LISTEN_HOST ?? '127.0.0.1', () => {
  process.stdout.write(`READY ${process.pid} ${(server.address() as AddressInfo).port}\n`);
});
