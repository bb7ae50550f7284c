import { cycloneProject } from '../../vitest.shared.js';

// No template database: the soak brings its own embedded PostgreSQL.
export default cycloneProject('soak', { globalSetup: [], testTimeout: 150_000 });
