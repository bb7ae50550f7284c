export { type CrashHarness, type CrashSuiteSpec, crashSuite } from './crash-suite.js';
export {
  oneStep,
  runOnce,
  startWorker,
  stepOf,
  type TestWorkerOptions,
} from './harness.js';
export { type ComponentMigrationTests, componentMigrationTests } from './migrations.js';
export { expectNoAttemptUsed, waitForSnoozes } from './snooze.js';
export { type ChildWorkerOptions, startChildWorker } from './worker-main.js';
