/**
 * A worker child process, spawned by the harness (child-process.ts) with a `ChildSpec` in
 * `BENCH_CHILD` (see protocol.ts). It runs as plain JavaScript bundled by build-child.ts and
 * loads only its own system's module, so its memory and CPU are that system's plus Node's.
 */
import { createInterface } from 'node:readline';
import type { ChildSpec, DrainResult } from './protocol.js';
import { installQueryCounter, startCounting, stopCounting } from './query-counter.js';
import { setJobStart } from './systems/hooks.js';
import { loadSystem } from './systems/index.js';
import { errMessage, msBetween, nowNs, sleep } from './util.js';

const emit = (line: string) => process.stdout.write(`${line}\n`);

function fail(err: unknown): never {
  emit(`@ERR ${errMessage(err).replaceAll('\n', ' ')}`);
  process.stderr.write(`${err instanceof Error ? err.stack : String(err)}\n`);
  process.exit(1);
}
process.on('uncaughtException', fail);
process.on('unhandledRejection', fail);

const raw = process.env.BENCH_CHILD;
if (!raw) fail(new Error('BENCH_CHILD is not set'));
const spec = JSON.parse(raw) as ChildSpec;

installQueryCounter(['pg', 'graphile-worker', 'pg-boss']);
const system = await loadSystem(spec.system);

// What a handler does first, per mode.
let handled = 0;
let t0: bigint | undefined;
let cpu0: NodeJS.CpuUsage | undefined;
setJobStart((payload) => {
  switch (spec.mode) {
    case 'drain':
      handled++;
      if (t0 === undefined) {
        t0 = nowNs();
        cpu0 = process.cpuUsage();
        startCounting();
        emit('@T0');
      }
      return;
    case 'latency': {
      const t = (payload as { t?: string } | null)?.t;
      if (t) emit(`@LAT ${nowNs() - BigInt(t)}`);
      return;
    }
    case 'victim':
      emit('@STARTED');
      return new Promise<void>(() => {}); // hangs until SIGKILL
    case 'rescuer':
      emit(`@RECOVERED ${nowNs()}`);
      return;
  }
});

/**
 * Exits at once: closing the process closes every connection, and each backend flushes its
 * statistics as it exits (the harness reads them next). A graceful stop would only add time.
 */
function exit(): never {
  process.exit(0);
}

const started = nowNs();
let stopped = false;
let onStop: (() => void) | undefined;
const worker = await system.startWorker(spec);
createInterface({ input: process.stdin }).on('line', (line) => {
  const command = line.trim();
  if (command === 'EXIT') exit();
  // STOP: the drain ends now (row 18: the harness knows when a fleet of processes is done).
  if (command === 'STOP') {
    stopped = true;
    onStop?.();
  }
  // MARK: the measured window (statements, CPU) starts now instead of at the first handler start.
  if (command === 'MARK') {
    cpu0 = process.cpuUsage();
    startCounting();
    emit('@MARKED');
  }
});
process.stdin.on('end', exit);
emit('@READY');

if (spec.mode === 'drain' && spec.untilStop) {
  // The cap counts from the worker's start, as below.
  const capLeft = spec.capMs - msBetween(started, nowNs());
  await new Promise<void>((resolve) => {
    if (stopped) return resolve();
    const t = setTimeout(resolve, Math.max(0, capLeft));
    onStop = () => {
      clearTimeout(t);
      resolve();
    };
  });
}

if (spec.mode === 'drain') {
  let capped = false;
  let jobs = spec.expected;
  for (;;) {
    await sleep(2);
    let done: boolean;
    if (stopped) break;
    if (worker.completed) done = worker.completed() >= spec.expected;
    else done = handled >= spec.expected && (await worker.pending?.()) === 0;
    if (done) break;
    if (msBetween(started, nowNs()) > spec.capMs) {
      capped = true;
      jobs = worker.completed
        ? worker.completed()
        : spec.expected - ((await worker.pending?.()) ?? spec.expected);
      break;
    }
  }
  const end = nowNs();
  const counted = stopCounting();
  const cpu = process.cpuUsage(cpu0);
  const result: DrainResult = {
    ms: t0 === undefined ? Number.NaN : msBetween(t0, end),
    endNs: String(end),
    jobs,
    capped,
    cpuMs: (cpu.user + cpu.system) / 1000,
    rssMiB: process.resourceUsage().maxRSS / 1024,
    statements: counted.total,
    top: counted.statements.slice(0, 12),
  };
  emit(`@DONE ${JSON.stringify(result)}`);
}
