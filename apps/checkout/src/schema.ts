/**
 * The checkout's database: Cyclone's tables (core, the idempotency ledger, the SendGrid events
 * and Twilio callbacks tables of the adapters) and the shop's own tables in schema `checkout`
 * (the refund, follow-up and reconciliation columns and table are added to an older one).
 * Safe to run again and from several processes at once.
 */
import type { Client } from '@cyclone/core';
import { migrateIdempotency } from '@cyclone/idempotency';
import { migrateSendgrid } from '@cyclone/sendgrid';
import { migrateTwilio } from '@cyclone/twilio';

/** What the shop sells: SKU → unit price in cents. The API computes the amount from it. */
export const CATALOG = {
  widget: 1_999,
  gadget: 4_950,
  gizmo: 899,
} as const;
export type Sku = keyof typeof CATALOG;
export const SKUS = Object.keys(CATALOG) as [Sku, ...Sku[]];

/** Stock each SKU starts with (and is topped up to by `restock`). */
export const INITIAL_STOCK = 1_000_000;

const TABLES = `
CREATE SCHEMA IF NOT EXISTS checkout;

CREATE TABLE IF NOT EXISTS checkout.inventory (
  sku        text PRIMARY KEY,
  available  int  NOT NULL CHECK (available >= 0)
);

-- One row per order, written by the API in the same transaction as the run (submitOnce), then
-- updated by the workflow's steps on their completion transactions.
CREATE TABLE IF NOT EXISTS checkout.orders (
  order_id            text PRIMARY KEY,
  run_id              uuid NOT NULL UNIQUE,
  submit_key          text NOT NULL,
  sku                 text NOT NULL,
  quantity            int  NOT NULL,
  amount_cents        int  NOT NULL,
  currency            text NOT NULL,
  email               text NOT NULL,
  phone               text NOT NULL,
  status              text NOT NULL DEFAULT 'accepted',
  payment_intent      text,
  receipt_message_id  text,
  sms_sid             text,
  created_at          timestamptz NOT NULL DEFAULT now(),
  updated_at          timestamptz NOT NULL DEFAULT now(),
  fulfilled_at        timestamptz
);

-- Every completion-transaction write also appends here. Deliberately no unique constraint on
-- (order_id, node): a step whose business write happened twice would show as two rows.
CREATE TABLE IF NOT EXISTS checkout.order_events (
  id        bigserial PRIMARY KEY,
  order_id  text NOT NULL,
  run_id    uuid NOT NULL,
  node      text NOT NULL,
  attempt   int  NOT NULL,
  detail    text NOT NULL,
  at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS order_events_order ON checkout.order_events (order_id);

-- Provider calls whose outcome was unknown (a lost response, a worker killed mid-call) and
-- that a later attempt settled: how, and with which attempt.
CREATE TABLE IF NOT EXISTS checkout.unknown_outcomes (
  key          text PRIMARY KEY,
  run_id       uuid NOT NULL,
  node         text NOT NULL,
  provider     text NOT NULL,
  resolved_by  text NOT NULL,
  attempt      int  NOT NULL,
  at           timestamptz NOT NULL DEFAULT now()
);

-- Written by the refund and follow-up steps (added to the orders of an older database).
ALTER TABLE checkout.orders
  ADD COLUMN IF NOT EXISTS refund_id             text,
  ADD COLUMN IF NOT EXISTS refunded_at           timestamptz,
  ADD COLUMN IF NOT EXISTS follow_up_message_id  text,
  ADD COLUMN IF NOT EXISTS followed_up_at        timestamptz;

-- One row per payment reconciliation run (reconcile.ts): what it compared and what disagreed.
CREATE TABLE IF NOT EXISTS checkout.reconciliations (
  run_id         uuid PRIMARY KEY,
  fire_at        timestamptz NOT NULL,
  since          timestamptz NOT NULL,
  charges        int  NOT NULL,
  refunds        int  NOT NULL,
  orders         int  NOT NULL,
  matched        int  NOT NULL,
  pending        int  NOT NULL,
  discrepancies  jsonb NOT NULL,
  at             timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS reconciliations_fire_at ON checkout.reconciliations (fire_at);
`;

/**
 * Migrates everything the checkout needs: core, then the ledger, the adapters' tables, then
 * the shop's tables; puts every catalog SKU in stock.
 */
export async function migrateCheckout(client: Client): Promise<void> {
  await migrateIdempotency(client); // core's migrations, then the ledger's
  await migrateSendgrid(client);
  await migrateTwilio(client);
  // Nothing to do when the tables are there: no DDL (and its locks) on a live database.
  if (await tablesExist(client)) return;
  const c = await client.pool.connect();
  try {
    // CREATE … IF NOT EXISTS races with itself across processes: serialise on a lock.
    await c.query('BEGIN');
    await c.query("SELECT pg_advisory_xact_lock(hashtext('cyclone-example-checkout'))");
    await c.query(TABLES);
    await c.query(
      `INSERT INTO checkout.inventory (sku, available)
       SELECT unnest($1::text[]), $2 ON CONFLICT (sku) DO NOTHING`,
      [SKUS, INITIAL_STOCK],
    );
    await c.query('COMMIT');
  } catch (err) {
    await c.query('ROLLBACK').catch(() => {});
    throw err;
  } finally {
    c.release();
  }
}

async function tablesExist(client: Client): Promise<boolean> {
  const { rows } = await client.pool.query<{ n: number }>(
    `SELECT count(to_regclass(t))::int AS n FROM unnest($1::text[]) AS t`,
    [
      [
        'checkout.inventory',
        'checkout.orders',
        'checkout.order_events',
        'checkout.unknown_outcomes',
        // Created with the orders' newer columns: its presence says they are there too.
        'checkout.reconciliations',
      ],
    ],
  );
  return rows[0]?.n === 5;
}

/** Tops every catalog SKU up to `INITIAL_STOCK` (the demo does, so it never runs out). */
export async function restock(client: Client): Promise<void> {
  await client.pool.query(
    'UPDATE checkout.inventory SET available = $2 WHERE sku = ANY($1::text[])',
    [SKUS, INITIAL_STOCK],
  );
}
