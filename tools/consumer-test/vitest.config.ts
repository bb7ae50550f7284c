import { cycloneProject } from '../../vitest.shared.js';

// No template database: the test creates (and drops) its own, and installs packages with npm.
export default cycloneProject('consumer-test', {
  globalSetup: [],
  testTimeout: 120_000,
  hookTimeout: 180_000,
});
