import { cycloneProject } from '../../vitest.shared.js';

// The test runs the whole program (worker processes included) as a child process.
export default cycloneProject('crash-matrix', { testTimeout: 90_000, hookTimeout: 60_000 });
