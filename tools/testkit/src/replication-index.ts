/**
 * `@cyclone/testkit/replication`: a primary with a synchronous standby (replication.ts) and the
 * address that moves to the new primary on failover (switch-proxy.ts), importable without the
 * rest of the kit (the soak uses it).
 */
export {
  type FailoverTimes,
  type PgNode,
  postgresBinDir,
  ReplicatedCluster,
  type ReplicatedClusterOptions,
  type SynchronousCommit,
} from './replication.js';
export { type ProxyTarget, SwitchProxy } from './switch-proxy.js';
