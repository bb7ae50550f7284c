import { cycloneProject } from '../../vitest.shared.js';

export default cycloneProject('core', { testTimeout: 60_000, hookTimeout: 60_000 });
