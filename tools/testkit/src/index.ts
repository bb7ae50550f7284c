export {
  ChildWorker,
  type ExitInfo,
  killAllChildren,
  liveChildren,
  READY_LINE,
  type SpawnWorkerOptions,
  spawnWorker,
} from './child.js';
export { ADMIN_URL, createTestDb, type TestDb, templateName, urlFor } from './db.js';
export { type MigrateTemplate, templateSetup } from './global-setup.js';
export { HostNetwork, type NetHost, netnsSupport } from './netns.js';
export { PgServer, type PgServerOptions, serverBinDir } from './pg-server.js';
export {
  type PgBouncer,
  type PgBouncerOptions,
  pgbouncerVersion,
  startPgBouncer,
} from './pgbouncer.js';
export {
  type PartitionOutcome,
  ProviderPartition,
  type ReceivedRequest,
  type ScenarioTiming,
} from './provider-partition.js';
export {
  engineClientOptions,
  engineUrl,
  engineWorkerOptions,
  type TestVia,
  testVia,
} from './via.js';
export { count, type Deferred, deferred, mapLimit, type WaitOptions, waitFor } from './wait.js';
export { announceReady, emitLine, envNumber, requireEnv } from './worker-process.js';
