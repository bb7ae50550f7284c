import { cycloneProject } from '../../vitest.shared.js';

// The testkit's own tests: no database.
export default cycloneProject('testkit', { globalSetup: [] });
