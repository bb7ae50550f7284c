import { pgbouncerProject } from '../../vitest.shared.js';

// Tests again with the engine behind PgBouncer (transaction pooling).
export default pgbouncerProject(
  'core',
  ['test/completion-tx.blocked.test.ts', 'test/stop.stuck-claim.test.ts'],
  { testTimeout: 60_000, hookTimeout: 60_000 },
);
