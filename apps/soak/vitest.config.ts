import { cycloneProject } from '../../vitest.shared.js';

// No template database: the soak brings its own servers (embedded, or a primary and its standby,
// whose setup takes a while longer on a loaded machine).
export default cycloneProject('soak', { globalSetup: [], testTimeout: 300_000 });
