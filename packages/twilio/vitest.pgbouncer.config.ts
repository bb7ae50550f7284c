import { pgbouncerProject } from '../../vitest.shared.js';

// The crash tests again with the engine behind PgBouncer (transaction pooling).
export default pgbouncerProject('twilio', ['test/crash.test.ts']);
