/**
 * This package's table, `cyclone_sendgrid_events` (the Event Webhook events,
 * migrations/000001_events.sql), migrated under component `sendgrid`, and how to reach it.
 */
import { type AdapterDb, defineAdapterTables } from '@cyclone/idempotency';
import { migrations } from './migrations.generated.js';

export type { Queryable } from '@cyclone/idempotency';

/** The events table's migrations and schema. */
export const sendgridTables = defineAdapterTables('sendgrid', migrations);

/** Where the events table lives. A core `Client` (`{ pool, schema }`) fits as it is. */
export type SendgridDb = AdapterDb;

/**
 * Applies this package's migrations (component `sendgrid`): advisory-locked, idempotent. Run it
 * after core's and idempotency's migrations.
 * @param db a core `Client`, or `{ pool, schema }` with a `pg.Pool`.
 * @returns the names of the migrations applied now.
 */
export const migrateSendgrid = sendgridTables.migrate;
