/**
 * The workflows of the browser tests, shared by the test file (which submits runs) and the worker
 * child process (which runs them). What fails is steered from the test through the `ui_switch`
 * table; a fake payment provider counts its real effects in `ui_fake_charges`, so the test can
 * prove a retried node did not charge twice.
 */
import {
  type Context,
  NonRetryableError,
  newAction,
  newSchedule,
  newWorkflow,
} from '@cyclone/core';
import { once } from '@cyclone/idempotency';
import pg from 'pg';

let pool: pg.Pool | undefined;

/** The test database's pool of this process (the worker's flows read switches through it). */
export function flowsPool(url: string): pg.Pool {
  pool ??= new pg.Pool({ connectionString: url, max: 4 });
  return pool;
}

const db = (): pg.Pool => {
  if (!pool) throw new Error('flowsPool(url) was not called in this process');
  return pool;
};

/** The tables the flows use; created by the test before the worker starts. */
export const FLOW_TABLES_SQL = `
  CREATE TABLE IF NOT EXISTS ui_switch (name text PRIMARY KEY, on_ boolean NOT NULL);
  CREATE TABLE IF NOT EXISTS ui_fake_charges (
    key text PRIMARY KEY, calls int NOT NULL, charge_id text NOT NULL);
`;

/** Whether the switch `name` is on. */
async function on(name: string): Promise<boolean> {
  const r = await db().query<{ on_: boolean }>('SELECT on_ FROM ui_switch WHERE name = $1', [name]);
  return r.rows[0]?.on_ === true;
}

/** Turns the switch `name` on or off (the test's side). */
export async function setSwitch(q: pg.Pool, name: string, value: boolean): Promise<void> {
  await q.query(
    'INSERT INTO ui_switch (name, on_) VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET on_ = $2',
    [name, value],
  );
}

/**
 * The fake provider's charge: one real effect per key, like a provider that deduplicates by
 * idempotency key; `calls` counts the requests it received under that key.
 */
async function fakeCharge(key: string, amount: number): Promise<{ id: string; amount: number }> {
  const r = await db().query<{ charge_id: string }>(
    `INSERT INTO ui_fake_charges (key, calls, charge_id) VALUES ($1, 1, 'ch_' || md5($1))
     ON CONFLICT (key) DO UPDATE SET calls = ui_fake_charges.calls + 1
     RETURNING charge_id`,
    [key],
  );
  return { id: r.rows[0]?.charge_id ?? '', amount };
}

const quick = () => 50;

const Reserve = newAction('reserve', async (_ctx: Context, input: { items: string[] }) => ({
  reserved: input.items,
  warehouse: 'north',
}));

const Charge = newAction(
  'charge',
  async (ctx: Context, input: { amount: number }) => {
    const charge = await once(
      ctx,
      {
        request: { amount: input.amount },
        provider: 'fakepay',
        operation: 'POST /charges',
        reference: (r: { id: string }) => r.id,
      },
      (key) => fakeCharge(key, input.amount),
    );
    // The effect above is in the ledger before this throws: a retry replays it, no second charge.
    if (await on('charge-fails')) {
      throw new Error('the fraud check service answered 503 after the charge');
    }
    return { chargeId: charge.id, amount: charge.amount };
  },
  { maxAttempts: 2, backoff: quick },
);

const Email = newAction(
  'email',
  async (ctx: Context, input: { to: string }) => {
    const sent = await once(
      ctx,
      { request: { to: input.to }, provider: 'fakemail', operation: 'send' },
      async (key) => ({ messageId: `msg-${key.length}`, to: input.to }),
    );
    return sent;
  },
  { maxAttempts: 3, backoff: quick },
);

const Ship = newAction('ship', async () => ({ carrier: 'ups', tracking: '1Z999' }), {
  maxAttempts: 3,
  backoff: quick,
});

const Done = newAction('done', async () => ({ ok: true }));

/** Input of a Shop run. */
export interface ShopInput {
  items: string[];
  amount: number;
  email: string;
}

/** An order: reserve → charge → (email, ship) → done. */
export const Shop = newWorkflow('shop', {
  nodes: {
    reserve: { action: Reserve, input: (run: ShopInput) => ({ items: run.items }) },
    charge: {
      action: Charge,
      after: ['reserve'],
      input: (run: ShopInput) => ({ amount: run.amount }),
    },
    email: { action: Email, after: ['charge'], input: (run: ShopInput) => ({ to: run.email }) },
    ship: { action: Ship, after: ['charge'] },
    done: { action: Done, after: ['email', 'ship'] },
  },
});

/** The input of the `n`th Shop run. */
export const shopInput = (n: number): ShopInput => ({
  items: ['sku-1', `sku-${n}`],
  amount: 1000 + n,
  email: `buyer${n}@example.com`,
});

const Flaky = newAction(
  'flaky',
  async (_ctx: Context, input: { switch: string }) => {
    if (await on(input.switch)) {
      throw new NonRetryableError('the partner API refused the request (HTTP 422)');
    }
    return { pushed: true };
  },
  { maxAttempts: 1 },
);

/** One node that fails (discarded at once) while the switch its input names is on. */
export const Sync = newWorkflow('sync', {
  nodes: { push: { action: Flaky, input: (run: { switch: string }) => ({ switch: run.switch }) } },
});

const Sleep = newAction(
  'sleep',
  (ctx: Context) =>
    new Promise<{ slept: true }>((resolve, reject) => {
      const t = setTimeout(() => resolve({ slept: true }), 600_000);
      ctx.signal.addEventListener('abort', () => {
        clearTimeout(t);
        reject(new Error('aborted'));
      });
    }),
  { timeout: 900_000 },
);

/** A run that stays running until cancelled. */
export const Slow = newWorkflow('slow', { nodes: { wait: { action: Sleep } } });

const Export = newAction('export', async (_ctx: Context, input: { mb: number }) => {
  // About `mb` MB of JSON: rows of a report.
  const row = { id: 0, sku: 'sku-000000', title: 'x'.repeat(80), qty: 1, price: 1999 };
  const rows = [];
  const n = Math.ceil((input.mb * 1024 * 1024) / (JSON.stringify(row).length + 1));
  for (let i = 0; i < n; i++)
    rows.push({ ...row, id: i, sku: `sku-${String(i).padStart(6, '0')}` });
  return { rows, count: n };
});

/** One node whose output is `mb` MB. */
export const Report = newWorkflow('report', {
  nodes: { export: { action: Export, input: (run: { mb: number }) => ({ mb: run.mb }) } },
});

const Refund = newAction(
  'refund',
  async (ctx: Context) =>
    once(
      ctx,
      {
        request: { amount: 500 },
        provider: 'fakepay',
        operation: 'POST /refunds',
        quietPeriodMs: 3_600_000,
        classify: () => ({ kind: 'ambiguous', reason: 'timeout after 30 s' }),
      },
      async () => {
        throw new Error('socket timeout');
      },
    ),
  { maxAttempts: 3, backoff: quick },
);

/** A provider call whose outcome is unknown (the call timed out): the unknown-outcomes page. */
export const RefundFlow = newWorkflow('refund', { nodes: { refund: { action: Refund } } });

const Ack = newAction('ack', async (_ctx: Context, input: unknown) => ({ acked: input }));

/** Waits for the signal `approved`, then acknowledges it. */
export const Approval = newWorkflow('approval', {
  nodes: {
    approve: { waitFor: 'approved', timeoutMs: 3_600_000 },
    ack: { action: Ack, after: ['approve'], input: (_run, up) => up.approve ?? null },
  },
});

/** An hourly report, for the schedules page (no fire time falls inside a test). */
export const HourlyReport = newSchedule('hourly-report', {
  cron: '0 * * * *',
  workflow: Report,
  input: () => ({ mb: 0.001 }),
  catchUp: 'none',
});

/** One message at a time per customer: an action whose only limit has a key. */
const NotifyCustomer = newAction(
  'notify-customer',
  async (_ctx: Context, input: { customer: string }) => ({ sent: input.customer }),
  { concurrency: { limit: 1, key: (i: { customer: string }) => i.customer } },
);

/** At most 5 texts a second, for the whole action: a limit without a key. */
const SendSms = newAction('send-sms', async () => ({ sent: true }), {
  rateLimit: { limit: 5, periodMs: 1_000 },
});

/**
 * Limited actions for the limits page; the tests never submit it, so both stay idle (nothing
 * running or waiting), as on a quiet day.
 */
export const Notify = newWorkflow('notify', {
  nodes: {
    notify: { action: NotifyCustomer },
    sms: { action: SendSms, after: ['notify'] },
  },
});

/** Every workflow the worker runs. */
export const ALL_FLOWS = [Shop, Sync, Slow, Report, RefundFlow, Approval, Notify];
