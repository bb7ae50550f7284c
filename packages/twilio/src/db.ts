/**
 * This package's table (the status callbacks, migrations/000001_status_callbacks.sql) and how to
 * reach it: a pool and the Cyclone schema. A core `Client` fits `TwilioDb` as it is.
 */
import { migrateComponent } from '@cyclone/core/internal';
import type { AdapterDb } from '@cyclone/idempotency';
import { migrations } from './migrations.generated.js';

export type { Queryable } from '@cyclone/idempotency';

/** The component name of this package's migrations in `cyclone_migrations`. */
export const MIGRATION_COMPONENT = 'twilio';

/** Where the callbacks table lives. A core `Client` (`{ pool, schema }`) fits as it is. */
export type TwilioDb = AdapterDb;

/**
 * Applies this package's migrations (component `twilio`) through core's `migrateComponent`:
 * advisory-locked, idempotent. Run it after core's and idempotency's migrations.
 * @param db a core `Client`, or `{ pool, schema }` with a `pg.Pool`.
 * @returns the names of the migrations applied now.
 */
export function migrateTwilio(db: Parameters<typeof migrateComponent>[0]): Promise<string[]> {
  return migrateComponent(db, MIGRATION_COMPONENT, migrations);
}
