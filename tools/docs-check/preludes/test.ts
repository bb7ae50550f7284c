// Prelude of samples written as part of a vitest test: `expect`, and the run under test.
import { expect } from 'vitest';

declare const runId: string;
void expect;
