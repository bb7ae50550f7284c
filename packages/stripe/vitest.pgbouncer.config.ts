import { pgbouncerProject } from '../../vitest.shared.js';

// The crash tests again with the engine behind PgBouncer (transaction pooling).
export default pgbouncerProject('stripe', ['test/crash.test.ts'], {
  env: { STRIPE_SUPPRESS_NOTICES: 'true' },
});
