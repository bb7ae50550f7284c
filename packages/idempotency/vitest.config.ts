import { cycloneProject } from '../../vitest.shared.js';

export default cycloneProject('idempotency', { testTimeout: 60_000, hookTimeout: 60_000 });
