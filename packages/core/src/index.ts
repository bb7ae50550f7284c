export * from './client.js';
export * from './definitions.js';
export * from './errors.js';
export { type Logger, silentLogger, consoleLogger } from './logger.js';
export { applyMigrations, type Migration } from './migrate.js';
export { DEFAULT_SCHEMA } from './schema.js';
export { DEFAULT_MAX_PAYLOAD_BYTES } from './json.js';
export * from './worker.js';
