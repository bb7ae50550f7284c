import { cycloneProject } from '../../vitest.shared.js';

// The demo test runs the whole demo (API, workers, fakes) as a child process: give it room.
export default cycloneProject('checkout', { testTimeout: 120_000, hookTimeout: 60_000 });
