export * from './client.js';
export * from './definitions.js';
export * from './errors.js';
export { DEFAULT_MAX_PAYLOAD_BYTES } from './json.js';
export { consoleLogger, type Logger, silentLogger } from './logger.js';
export { applyMigrations, type Migration } from './migrate.js';
export { DEFAULT_SCHEMA } from './schema.js';
export * from './worker.js';
