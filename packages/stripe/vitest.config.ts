import { cycloneProject } from '../../vitest.shared.js';

export default cycloneProject('stripe', {
  env: { STRIPE_SUPPRESS_NOTICES: 'true' },
  typecheck: { enabled: true, include: ['test/**/*.test-d.ts'], tsconfig: './tsconfig.json' },
});
