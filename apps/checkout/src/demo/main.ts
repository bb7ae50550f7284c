/**
 * `pnpm demo`: the checkout under load while its workers die.
 *
 *  1. The database: DATABASE_URL, else an embedded PostgreSQL under `.cyclone/`; migrated.
 *  2. The Stripe, SendGrid and Twilio fakes, in this process (they count every real effect).
 *  3. The API (a child process) and three worker processes.
 *  4. The load generator sends N orders over HTTP; 20 % of them are sent again after a client
 *     timeout; one in ten is over $100 and held for approval, and half of those are approved
 *     (the others time out and are refunded). Meanwhile a worker holding steps is SIGKILLed
 *     every few seconds and replaced, and each provider once drops its response after doing
 *     the work (a lost response). The waits are short (`CHECKOUT_TIMINGS=demo`): follow-up
 *     e-mails 1.5 s after the shipment, approvals time out after 4 s, the payment
 *     reconciliation fires every 3 s.
 *  5. When every run has finished, and the reconciliation has fired once more, the summary:
 *     what happened, and each invariant Cyclone promises (one run per order; one charge, one
 *     e-mail, one SMS per order; completion-tx writes exactly once; each held order approved or
 *     refunded, never both; one reconciliation per fire time; …). Exit 0 only when all hold.
 */
import { randomBytes } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client } from '@cyclone/core';
import { MultiBar, Presets } from 'cli-progress';
import { cycloneDir, resolveDatabase } from '../db.js';
import { pumpSendgridEvents, startFakes } from '../fakes.js';
import { realProviders } from '../providers.js';
import { migrateCheckout, restock } from '../schema.js';
import { DEMO_TIMINGS } from '../workflow.js';
import { startChaos } from './chaos.js';
import { runLoad } from './load.js';
import { parseOptions, USAGE } from './options.js';
import { Child, WorkerChild } from './processes.js';
import { render, verdict } from './report.js';
import { serveUi } from './ui.js';

const src = join(dirname(fileURLToPath(import.meta.url)), '..');
const started = Date.now();
const tty = Boolean(process.stdout.isTTY);

async function main(): Promise<number> {
  const opts = parseOptions(process.argv.slice(2));
  if (opts === 'help') {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  const batch = randomBytes(3).toString('hex');
  const prefix = `ord-${batch}`;
  const logDir = join(cycloneDir(), 'checkout-demo', batch);
  mkdirSync(logDir, { recursive: true });

  let bar: ReturnType<MultiBar['create']> | undefined;
  let status: ReturnType<MultiBar['create']> | undefined;
  let multibar: MultiBar | undefined;
  const say = (line: string) => {
    if (multibar) multibar.log(`${line}\n`);
    else process.stdout.write(`${line}\n`);
  };

  const db = await resolveDatabase();
  const client = new Client({ connectionString: db.connectionString, poolSize: 4 });
  const fakes = await startFakes();
  const children: Child[] = [];
  const workers: WorkerChild[] = [];
  let stopPump: (() => Promise<void>) | undefined;
  try {
    await migrateCheckout(client);
    await restock(client);
    const leftovers = await cancelLeftovers(client);
    if (leftovers > 0) say(`demo: cancelled ${leftovers} unfinished runs of an interrupted demo`);
    const real = realProviders();
    if (real.stripe || real.sendgrid || real.twilio) {
      say(
        'demo: provider keys are set, but the demo counts effects at the local fakes: it uses the fakes (run the API and a worker yourself for the real services)',
      );
    }
    const env: Record<string, string> = {
      DATABASE_URL: db.connectionString,
      ...fakes.env,
      // The children must talk to the fakes, whatever this shell has.
      STRIPE_SECRET_KEY: '',
      SENDGRID_API_KEY: '',
      TWILIO_ACCOUNT_SID: '',
      TWILIO_AUTH_TOKEN: '',
      PUBLIC_URL: '', // the API answers on its own address
      EXIT_WITH_PARENT: '1', // if this process dies, its children follow
      // Timers, approval timeouts and the reconciliation's cron in seconds: the API (which fixes
      // a run's timers at submit) and the workers must agree.
      CHECKOUT_TIMINGS: 'demo',
    };

    const api = new Child(
      'api',
      join(src, 'api-main.ts'),
      { ...env, PORT: '0', API_POOL_SIZE: '5' },
      logDir,
      /^LISTENING (\S+)$/,
    );
    children.push(api);
    const apiUrl = (await api.ready)[1] as string;
    let nextWorker = 1;
    /** Worker id → the demo's name for it (w1, w2…), for the progress line. */
    const workerNames = new Map<string, string>();
    const startWorker = async () => {
      const name = `w${nextWorker++}`;
      const w = await WorkerChild.start(
        name,
        join(src, 'worker-main.ts'),
        {
          ...env,
          PUBLIC_URL: apiUrl, // Twilio's status callbacks go to the API
          WORKER_LEASE_MS: '2000', // a killed worker's steps come back after ~2 s
          // 3 workers × (6 + 2 control + 1 listener + 4 client) connections stay well under
          // PostgreSQL's default of 100, replacements included.
          WORKER_CONCURRENCY: '6',
        },
        logDir,
        `checkout-demo-${batch}-${name}`,
      );
      children.push(w);
      workerNames.set(w.workerId, name);
      return w;
    };
    workers.push(...(await Promise.all(Array.from({ length: opts.workers }, startWorker))));
    // Every reconciliation fire time from now on must make exactly one run.
    const reconcileFrom = await dbNow(client);
    stopPump = pumpSendgridEvents(fakes.sendgrid, `${apiUrl}/hooks/sendgrid`, 500);

    say(
      `demo: ${opts.orders} orders (batch ${prefix}) → API ${apiUrl}, workers ${workers.map((w) => `${w.name} (pid ${w.pid})`).join(', ')}`,
    );
    say(
      `demo: reserve → charge (Stripe) → receipt (SendGrid) ‖ sms (Twilio) ‖ approval (over $100, ${DEMO_TIMINGS.approvalTimeoutMs / 1000} s, else refund) → fulfil → follow-up (SendGrid, ${DEMO_TIMINGS.followUpDelayMs / 1000} s later); reconcile-payments '${DEMO_TIMINGS.reconcileCron}'; logs in ${relative(process.env.INIT_CWD ?? process.cwd(), logDir) || logDir}`,
    );

    const stock = async () =>
      (
        await client.pool.query<{ n: number }>(
          'SELECT coalesce(sum(available), 0)::int AS n FROM checkout.inventory',
        )
      ).rows[0]?.n ?? 0;
    const stockBefore = await stock();

    if (tty) {
      multibar = new MultiBar(
        {
          format:
            ' {bar} {value}/{total} runs done | {accepted} orders accepted | {killed} | {duration_formatted}',
          hideCursor: true,
          clearOnComplete: false,
          barsize: 30,
        },
        Presets.shades_classic,
      );
      bar = multibar.create(opts.orders, 0, {
        accepted: 0,
        killed: '0 workers killed',
      });
      // A second line under the bar: what the last runs wait for, once every order is in.
      status = multibar.create(1, 0, { waiting: '' }, { format: ' {waiting}' });
    }

    const chaos = startChaos({
      client,
      workers,
      startWorker,
      everyMs: opts.killEveryMs,
      maxKills: opts.maxKills,
      onKill: (victim, held, replacement) =>
        say(
          `demo: SIGKILL ${victim.name} (pid ${victim.pid}) holding ${held} step${held === 1 ? '' : 's'}${held === 0 ? ' (they had just finished; another kill follows)' : ''}; started ${replacement.name} (pid ${replacement.pid})`,
        ),
    });

    // Faults: once the load is under way, pick the order just accepted; each provider does its
    // work for it (charges, accepts the e-mail, creates the SMS) and then drops the response.
    const faults = { order: '' };
    let stripeFault: { readonly hits: number } | undefined;
    const injectFaults = (orderId: string, runId: string) => {
      if (!opts.faults || faults.order) return;
      faults.order = orderId;
      stripeFault = fakes.stripe.inject(
        { kind: 'reset', commit: true },
        {
          method: 'POST',
          path: '/v1/payment_intents',
          idempotencyKey: `${runId}:charge`,
          // The Stripe SDK re-sends a request whose connection closed once by itself, with the
          // same key (Stripe replays it); drop that answer too, so the step sees the loss.
          times: 2,
        },
      );
      fakes.sendgrid.inject(
        { kind: 'reset', commit: true },
        { match: (r) => r.rawBody.includes(`"order_id":"${orderId}"`) },
      );
      fakes.twilio.inject(
        { kind: 'reset', commit: true },
        { match: (r) => (r.form.get('Body') ?? '').includes(`Order ${orderId} `) },
      );
      say(
        `demo: order ${orderId}: Stripe, SendGrid and Twilio will each do the work, then lose the response`,
      );
    };
    /** Providers whose dropped response has been announced. */
    const announced = new Set<string>();
    /** Providers whose dropped response has happened. */
    const faultsHit = () =>
      !faults.order
        ? []
        : [
            ...((stripeFault?.hits ?? 0) > 0 ? ['Stripe'] : []),
            ...(fakes.sendgrid.pendingFaults === 0 ? ['SendGrid'] : []),
            ...(fakes.twilio.pendingFaults === 0 ? ['Twilio'] : []),
          ];

    let accepted = 0;
    let loadDone = false;
    const load = runLoad({
      apiUrl,
      orders: opts.orders,
      resend: opts.resend,
      concurrency: opts.concurrency,
      prefix,
      onAccepted: (n, orderId, runId) => {
        accepted = n;
        if (n >= Math.max(1, Math.floor(opts.orders * 0.1))) injectFaults(orderId, runId);
      },
    }).finally(() => {
      loadDone = true;
    });

    // Until every accepted order's run has finished (or the deadline).
    const deadline = started + opts.timeoutMs;
    let done = 0;
    let lastWaitLine = 0;
    for (;;) {
      const { rows } = await client.pool.query<{ done: number }>(
        `SELECT count(*)::int AS done FROM checkout.orders o
         JOIN cyclone.cyclone_runs r ON r.id = o.run_id
         WHERE o.order_id LIKE $1 AND r.state <> 'running'`,
        [`${prefix}-%`],
      );
      done = rows[0]?.done ?? 0;
      // Once every order is in and only the last few runs are left, say what they wait for (a
      // killed worker's lease, a provider's quiet period after a lost response, a backoff).
      const waiting =
        loadDone && done < accepted && accepted - done <= 3
          ? await waitingFor(client, prefix, accepted - done, chaos.killed, workerNames).catch(
              () => '',
            )
          : '';
      bar?.update(done, { accepted, killed: `${plural(chaos.killed.length, 'worker')} killed` });
      status?.update(0, { waiting: waiting.slice(0, (process.stdout.columns || 100) - 2) });
      if (!bar && waiting && Date.now() - lastWaitLine > 3_000) {
        lastWaitLine = Date.now();
        say(`demo: ${done}/${accepted} runs done; ${waiting}`);
      }
      for (const provider of faultsHit()) {
        if (announced.has(provider)) continue;
        announced.add(provider);
        say(`demo: ${provider} dropped its response for order ${faults.order} after the effect`);
      }
      if (loadDone && done >= accepted) break;
      if (Date.now() > deadline || chaos.error) break;
      await new Promise((r) => setTimeout(r, 300));
    }
    await chaos.stop();
    // One more reconciliation, after every order finished: it must match every charge and refund.
    let reconcileUntil: Date | undefined;
    if (!timedOutYet(deadline, loadDone, done, accepted)) {
      say(
        `demo: every run done; waiting for the next payment reconciliation ('${DEMO_TIMINGS.reconcileCron}')`,
      );
      reconcileUntil = await nextReconciliation(client, await dbNow(client), deadline);
    }
    const loadResult = await load;
    await stopPump();
    stopPump = undefined;
    status?.update(0, { waiting: '' });
    multibar?.stop();
    multibar = undefined;
    const timedOut = !(loadDone && done >= accepted);
    if (chaos.error) say(`demo: could not start a replacement worker: ${chaos.error.message}`);
    else if (timedOut) {
      say(`demo: timed out after ${opts.timeoutMs / 1000} s with ${done} / ${accepted} runs done`);
    }

    // The API and the workers are stopped while the verdict is counted (every run is done), so
    // that the demo ends as soon as it is printed.
    const stopped = Promise.all(children.map((c) => c.stop()));
    const v = await verdict({
      client,
      fakes,
      load: loadResult,
      ordersSent: opts.orders,
      prefix,
      killedWorkerIds: [...chaos.killed],
      missedKillIds: [...chaos.missed],
      heldByKilled: [...chaos.held],
      killsWanted: opts.maxKills > 0,
      faultsInjected: faults.order ? 3 : 0,
      faultsHit: faultsHit().length,
      stockBefore,
      stockAfter: await stock(),
      wallSeconds: (Date.now() - started) / 1000,
      timings: DEMO_TIMINGS,
      reconcileFrom,
      reconcileUntil,
    });
    await stopped;
    say('');
    say(render(v));
    const failed = v.checks.filter((c) => !c.ok);
    if (chaos.error) {
      failed.push({ name: 'workers replaced', ok: false, detail: chaos.error.message });
    } else if (timedOut) {
      failed.push({ name: 'finished in time', ok: false, detail: 'timed out' });
    }
    say(
      failed.length === 0
        ? `\nOK: every invariant holds. Look at the runs with \`pnpm cyclone runs --workflow checkout --limit 5\` and \`pnpm cyclone run <runId>\`.`
        : `\nFAILED: ${failed.map((c) => `${c.name} (${c.detail})`).join('; ')}`,
    );
    if (opts.json)
      say(`SUMMARY ${JSON.stringify({ ...v, ok: failed.length === 0, batch: prefix })}`);
    if (opts.uiPort !== undefined) await serveUi(client, opts.uiPort, say);
    return failed.length === 0 ? 0 : 1;
  } finally {
    multibar?.stop();
    await stopPump?.();
    await Promise.all(children.map((c) => c.stop()));
    await fakes.close();
    await client.close();
    await db.stop();
  }
}

/** PostgreSQL's clock. */
async function dbNow(client: Client): Promise<Date> {
  const { rows } = await client.pool.query<{ now: Date }>('SELECT clock_timestamp() AS now');
  return rows[0]?.now ?? new Date();
}

/** Whether the runs are not all done (the deadline passed, or a replacement failed). */
function timedOutYet(deadline: number, loadDone: boolean, done: number, accepted: number) {
  return !(loadDone && done >= accepted) || Date.now() > deadline;
}

/**
 * The first reconciliation fire time after `after`, once its run and every earlier one have
 * finished; undefined at the deadline.
 */
async function nextReconciliation(
  client: Client,
  after: Date,
  deadline: number,
): Promise<Date | undefined> {
  const prefix = 'schedule:reconcile-payments:';
  for (; Date.now() < deadline; await new Promise((r) => setTimeout(r, 200))) {
    const { rows } = await client.pool.query<{ fire_at: Date; settled: boolean }>(
      `WITH fired AS (
         SELECT substr(submit_key, $1::int)::timestamptz AS fire_at, state
         FROM cyclone.cyclone_runs
         WHERE workflow = 'reconcile-payments' AND submit_key LIKE $2 AND submit_key NOT LIKE $3)
       SELECT n.fire_at,
              NOT EXISTS (SELECT 1 FROM fired e WHERE e.fire_at <= n.fire_at
                          AND e.state = 'running') AS settled
       FROM fired n WHERE n.fire_at > $4 ORDER BY n.fire_at LIMIT 1`,
      [prefix.length + 1, `${prefix}%`, `${prefix}trigger:%`, after],
    );
    if (rows[0]?.settled) return rows[0].fire_at;
  }
  return undefined;
}

/** `1 worker`, `2 workers`. */
function plural(n: number, noun: string): string {
  return `${n} ${noun}${n === 1 ? '' : 's'}`;
}

/**
 * What the unfinished runs of the batch wait for, in a few words about the first one: its step
 * held by a killed worker until the lease expires, a retry after a backoff or a provider's quiet
 * period, a worker to claim it.
 */
async function waitingFor(
  client: Client,
  prefix: string,
  left: number,
  killed: readonly string[],
  names: ReadonlyMap<string, string>,
): Promise<string> {
  const { rows } = await client.pool.query<{
    order_id: string;
    node: string;
    state: string;
    wait_for: string | null;
    owner: string | null;
    in_ms: number | null;
    snoozes: number;
    error: string | null;
  }>(
    `SELECT o.order_id, s.node, s.state, s.wait_for, s.lease_owner AS owner,
            (extract(epoch FROM (CASE WHEN s.state = 'running' THEN s.lease_expires_at
                                      ELSE s.scheduled_at END) - now()) * 1000)::int AS in_ms,
            s.snoozes, s.errors -> -1 ->> 'message' AS error
     FROM checkout.orders o
     JOIN cyclone.cyclone_runs r ON r.id = o.run_id AND r.state = 'running'
     JOIN cyclone.cyclone_steps s ON s.run_id = r.id
       AND s.state IN ('running', 'retryable', 'scheduled', 'available')
     WHERE o.order_id LIKE $1
     ORDER BY o.order_id, s.node LIMIT 1`,
    [`${prefix}-%`],
  );
  const s = rows[0];
  if (!s) return '';
  const secs = (ms: number | null) => `${Math.max(0, (ms ?? 0) / 1000).toFixed(1)} s`;
  let what: string;
  if (s.state === 'running' && s.owner && killed.includes(s.owner)) {
    what = `held by killed ${names.get(s.owner) ?? 'worker'} until its lease expires (${secs(s.in_ms)})`;
  } else if (s.state === 'running') {
    what = `running on ${names.get(s.owner ?? '') ?? 'a worker'}`;
  } else if (s.state === 'retryable' && (s.in_ms ?? 0) > 0) {
    const why = /quiet period/.test(s.error ?? '')
      ? "a provider's quiet period after a lost response"
      : 'a backoff';
    what = `retry in ${secs(s.in_ms)} (${why})`;
  } else if (s.state === 'scheduled' && s.wait_for) {
    // A held order whose approval did not come: it times out, then is refunded.
    what = `waiting for '${s.wait_for}' (times out in ${secs(s.in_ms)})`;
  } else if (s.state === 'scheduled' && s.snoozes > 0) {
    // The ledger snoozes a step whose earlier call may still be in flight at the provider.
    what = `snoozed for ${secs(s.in_ms)} (a provider's quiet period after a lost response)`;
  } else if (s.state === 'scheduled') {
    what = `its timer: due in ${secs(s.in_ms)}`;
  } else {
    what = 'claimable, for the next free worker';
  }
  const more = left > 1 ? ` (+${left - 1} more run${left > 2 ? 's' : ''})` : '';
  return `waiting for ${s.order_id} ${s.node}: ${what}${more}`;
}

/**
 * Runs of an earlier demo that was interrupted are still `running`; their steps would call the
 * new fakes (and the old demo's API URL is part of their SMS requests). Cancel them.
 */
async function cancelLeftovers(client: Client): Promise<number> {
  const { rows } = await client.pool.query<{ run_id: string }>(
    `SELECT o.run_id FROM checkout.orders o JOIN cyclone.cyclone_runs r ON r.id = o.run_id
     WHERE r.state = 'running' AND o.order_id ~ '^ord-[0-9a-f]{6}-[0-9]{5}$'`,
  );
  for (const r of rows) await client.cancel(r.run_id);
  return rows.length;
}

main().then(
  (code) => process.exit(code),
  (err) => {
    process.stderr.write(`demo: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  },
);
