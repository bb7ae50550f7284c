import { pgbouncerProject } from '../../vitest.shared.js';

// The crash matrix, fencing, join race, submitOnce and cancellation tests again with the engine
// behind PgBouncer (transaction pooling).
export default pgbouncerProject(
  'core',
  [
    'test/crash.matrix.test.ts',
    'test/completion.fencing.test.ts',
    'test/join-race.test.ts',
    'test/submit-once.test.ts',
    'test/submit-once.serialization.test.ts',
    'test/completion-tx.blocked.test.ts',
    'test/stop.stuck-claim.test.ts',
    'test/partition.commit-gap.test.ts',
  ],
  { testTimeout: 60_000, hookTimeout: 60_000 },
);
