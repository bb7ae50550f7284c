export * from './client.js';
export * from './definitions.js';
export * from './errors.js';
export {
  canonicalJson,
  DEFAULT_MAX_PAYLOAD_BYTES,
  hashJson,
  isStorableText,
  storableText,
  toJson,
} from './json.js';
export { consoleLogger, type Logger, silentLogger } from './logger.js';
export { applyMigrations, type Migration, migrateComponent } from './migrate.js';
export { isConnectionError } from './pg-util.js';
export { REDACTED, redactSecrets } from './redact.js';
export { DEFAULT_SCHEMA, quoteSchema } from './schema.js';
export * from './worker.js';
