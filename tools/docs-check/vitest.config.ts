import { cycloneProject } from '../../vitest.shared.js';

// No database: the samples are compiled, not run (the consumer test runs getting-started).
export default cycloneProject('docs-check', { globalSetup: [], testTimeout: 120_000 });
