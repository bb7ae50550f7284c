/**
 * The schema name: validated once and quoted once, since it is the one identifier
 * interpolated into SQL. Every SQL text is built from a `QuotedSchema`, never from user input.
 */
import { ConfigError } from './errors.js';

/** Default schema of Cyclone's tables. */
export const DEFAULT_SCHEMA = 'cyclone';

/** A schema name: lower-case letter or `_`, then lower-case letters, digits or `_`; ≤ 55 bytes, so
 * that the NOTIFY channel `cyclone_<schema>` stays within PostgreSQL's 63-byte identifiers. */
const SCHEMA_NAME = /^[a-z_][a-z0-9_]{0,54}$/;

/**
 * Validates a schema name and returns it double-quoted for SQL.
 * @throws ConfigError when `name` is not a plain lower-case identifier of at most 55 characters
 *   (63 bytes, PostgreSQL's identifier limit, less the channel prefix `cyclone_`).
 */
export function quoteSchema(name: string): string {
  if (typeof name !== 'string' || !SCHEMA_NAME.test(name)) {
    throw new ConfigError(
      `schema name ${JSON.stringify(name)} is not a plain identifier (lower-case letter or _, then lower-case letters, digits or _, at most 55 characters)`,
    );
  }
  return `"${name}"`;
}

/** The NOTIFY channel of a schema: workers LISTEN on it; the payload is the workflow name. */
export const channelOf = (schema: string) => `cyclone_${schema}`;
