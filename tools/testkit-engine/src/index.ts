export { type CrashHarness, type CrashSuiteSpec, crashSuite } from './crash-suite.js';
export {
  oneStep,
  runOnce,
  startWorker,
  stepOf,
  type TestWorkerOptions,
} from './harness.js';
export {
  expectKeptLooking,
  type InProgressLook,
  inProgressLooks,
  waitForLooks,
} from './in-progress.js';
export { type ComponentMigrationTests, componentMigrationTests } from './migrations.js';
export { type ChildWorkerOptions, startChildWorker } from './worker-main.js';
