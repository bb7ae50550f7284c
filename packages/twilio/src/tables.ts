/**
 * This package's table, `cyclone_twilio_callbacks` (the status callbacks,
 * migrations/000001_status_callbacks.sql), migrated under component `twilio`, and how to reach it.
 */
import { type AdapterDb, defineAdapterTables } from '@cyclone/idempotency';
import { migrations } from './migrations.generated.js';

export type { Queryable } from '@cyclone/idempotency';

/** The callbacks table's migrations and schema. */
export const twilioTables = defineAdapterTables('twilio', migrations);

/** Where the callbacks table lives. A core `Client` (`{ pool, schema }`) fits as it is. */
export type TwilioDb = AdapterDb;

/**
 * Applies this package's migrations (component `twilio`): advisory-locked, idempotent. Run it
 * after core's and idempotency's migrations.
 * @param db a core `Client`, or `{ pool, schema }` with a `pg.Pool`.
 * @returns the names of the migrations applied now.
 */
export const migrateTwilio = twilioTables.migrate;
