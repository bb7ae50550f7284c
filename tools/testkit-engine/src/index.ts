export {
  oneStep,
  runOnce,
  startWorker,
  stepOf,
  type TestWorkerOptions,
} from './harness.js';
export { type ComponentMigrationTests, componentMigrationTests } from './migrations.js';
export { type ChildWorkerOptions, startChildWorker } from './worker-main.js';
