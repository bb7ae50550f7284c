/**
 * This package's table (the Event Webhook events, migrations/000001_events.sql) and how to
 * reach it: a pool and the Cyclone schema. A core `Client` fits `SendgridDb` as it is.
 */
import { migrateComponent } from '@cyclone/core/internal';
import type { AdapterDb } from '@cyclone/idempotency';
import { migrations } from './migrations.generated.js';

export type { Queryable } from '@cyclone/idempotency';

/** The component name of this package's migrations in `cyclone_migrations`. */
export const MIGRATION_COMPONENT = 'sendgrid';

/** Where the events table lives. A core `Client` (`{ pool, schema }`) fits as it is. */
export type SendgridDb = AdapterDb;

/**
 * Applies this package's migrations (component `sendgrid`) through core's `migrateComponent`:
 * advisory-locked, idempotent. Run it after core's and idempotency's migrations.
 * @param db a core `Client`, or `{ pool, schema }` with a `pg.Pool`.
 * @returns the names of the migrations applied now.
 */
export function migrateSendgrid(db: Parameters<typeof migrateComponent>[0]): Promise<string[]> {
  return migrateComponent(db, MIGRATION_COMPONENT, migrations);
}
